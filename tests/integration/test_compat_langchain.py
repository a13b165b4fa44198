"""A second real client stack: langchain-openai, used as agent frameworks use it (tool calling
with bind_tools, structured output with with_structured_output), against the default model."""
import json

import pydantic
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from test_compat import KEY, default_model_path  # noqa: F401 (the shared server setup)

pytestmark = pytest.mark.heavy  # LangChain end to end, constrained generation


@pytest.fixture(scope="module")
def server(ember):
    from conftest import Server
    s = Server(ember, default_model_path(), "--ctx-size", "2048", "--api-key", KEY)
    try:
        s.wait_ready(120)
        yield s
    finally:
        s.stop()


def chat(server, **kw):
    return ChatOpenAI(base_url=server.base + "/v1", api_key=KEY, model="default", temperature=0,
                      max_retries=0, timeout=120, **kw)


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"18 C and sunny in {city}"


def test_bind_tools_round_trip(server):
    llm = chat(server, max_tokens=64).bind_tools([get_weather], tool_choice="get_weather")
    question = HumanMessage("What is the weather in Paris?")
    ai = llm.invoke([question])
    assert len(ai.tool_calls) == 1
    call = ai.tool_calls[0]
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
    final = chat(server, max_tokens=40).bind_tools([get_weather]).invoke([question, ai, result])
    assert isinstance(final.content, str) and final.content


def test_streamed_tool_call_chunks_assemble(server):
    llm = chat(server, max_tokens=64).bind_tools([get_weather], tool_choice="any")
    merged = None
    for chunk in llm.stream("What is the weather in Oslo?"):
        merged = chunk if merged is None else merged + chunk
    assert merged.tool_calls and merged.tool_calls[0]["name"] == "get_weather"


class Answer(pydantic.BaseModel):
    city: str
    temperature_celsius: int
    sunny: bool


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_with_structured_output(server, method):
    llm = chat(server, max_tokens=120).with_structured_output(Answer, method=method,
                                                              include_raw=True)
    out = llm.invoke("Paris is 18 C and sunny today. Reply in JSON with city, "
                     "temperature_celsius and sunny.")
    assert out["parsing_error"] is None, out["raw"]
    assert isinstance(out["parsed"], Answer)
    json.dumps(out["parsed"].model_dump())
