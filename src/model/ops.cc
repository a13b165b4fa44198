#include "model/ops.h"

#include "tensor/quant.h"

namespace ember::model::ops {

GeluTable::GeluTable() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = tensor::fp16_to_f32(static_cast<uint16_t>(h));
    // the result is stored at half precision, as the reference's table is
    table_[h] = tensor::fp16_to_f32(tensor::f32_to_fp16(gelu_tanh(x)));
  }
}

uint16_t GeluTable::half_bits(float x) {
  return tensor::f32_to_fp16(x);
}

const GeluTable& gelu_table() {
  static const GeluTable table;
  return table;
}

}  // namespace ember::model::ops
