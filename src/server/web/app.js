// ember's chat page: streams /v1/chat/completions (SSE) into a conversation view. Stop aborts
// the fetch; the server sees the connection close and cancels the generation in its engine.
"use strict";
const $ = (id) => document.getElementById(id);
const log = $("log"), input = $("input"), sendBtn = $("send"), stopBtn = $("stop");
const statusEl = $("status");
// {role, content}: the whole conversation, resent each turn. New chat starts a new array, so an
// answer still ending (its catch and finally run after the abort) lands in the old one.
let history = [];
let controller = null;
let apiKey = localStorage.getItem("ember.apiKey") || "";

function headers() {
  const h = { "Content-Type": "application/json" };
  if (apiKey) h["Authorization"] = "Bearer " + apiKey;
  return h;
}

function askKey(message) {
  return new Promise((resolve) => {
    const dlg = $("key-dialog");
    dlg.querySelector("p").textContent = message;
    $("key").value = "";
    dlg.addEventListener("close", () => {
      apiKey = $("key").value.trim();
      localStorage.setItem("ember.apiKey", apiKey);
      input.focus();
      resolve();
    }, { once: true });
    dlg.showModal();
  });
}
// Not a <form>: submitting a form with a password field makes browsers offer to save it.
$("key-ok").addEventListener("click", () => $("key-dialog").close());
$("key").addEventListener("keydown", (e) => { if (e.key === "Enter") $("key-dialog").close(); });

async function loadModel() {
  for (;;) {
    const res = await fetch("/v1/models", { headers: headers() }).catch(() => null);
    if (res && res.status === 401) {
      await askKey(apiKey ? "That API key was not accepted. Try again:" : "This server requires an API key.");
      continue;
    }
    if (res && res.ok) {
      const names = (await res.json()).data.map((m) => m.id);
      $("model").textContent = names.find((n) => n !== "default") || "default";
    } else {
      setTimeout(loadModel, 2000);  // still loading
    }
    return;
  }
}

function bubble(role, text) {
  $("empty")?.remove();
  const el = document.createElement("div");
  el.className = "msg " + role;
  el.textContent = text;
  log.appendChild(el);
  log.scrollTop = log.scrollHeight;
  return el;
}

function note(el, text) {
  const n = document.createElement("span");
  n.className = "note";
  n.textContent = text;
  el.appendChild(n);
}

function setGenerating(on) {
  document.body.dataset.state = on ? "generating" : "idle";
  sendBtn.hidden = on;
  stopBtn.hidden = !on;
  if (!on) input.focus();
}

function rate(tokens, since) {
  const s = (performance.now() - since) / 1000;
  return tokens > 1 && s > 0 ? ((tokens - 1) / s).toFixed(1) + " tok/s" : "";
}

async function send() {
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  autosize();
  history.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant streaming", "");
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history);
  const body = {
    model: "default", messages, stream: true, stream_options: { include_usage: true },
    temperature: parseFloat($("temperature").value), max_tokens: parseInt($("max-tokens").value, 10) || undefined,
  };
  const conv = history, mine = new AbortController();
  controller = mine;
  // This turn writes the status line only while its conversation is the one shown.
  const status = (text) => { if (conv === history) statusEl.textContent = text; };
  setGenerating(true);
  status("thinking…");
  let answer = "", tokens = 0, first = 0, finish = null, usage = null;
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: mine.signal,
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      if (res.status === 401) askKey("This server requires an API key.");
      throw new Error((err.error && err.error.message) || res.statusText);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const msg = JSON.parse(data);
          if (msg.error) throw new Error(msg.error.message);
          if (msg.usage) usage = msg.usage;
          const choice = msg.choices && msg.choices[0];
          if (!choice) continue;
          if (choice.finish_reason) finish = choice.finish_reason;
          const piece = choice.delta && choice.delta.content;
          if (piece) {
            if (!first) first = performance.now();
            tokens++;
            answer += piece;
            out.textContent = answer;
            log.scrollTop = log.scrollHeight;
            status(tokens + " tokens · " + rate(tokens, first));
          }
        }
      }
    }
    if (usage) tokens = usage.completion_tokens;
    status(tokens + " tokens · " + rate(tokens, first) + (finish === "length" ? " · stopped at the token limit" : ""));
  } catch (e) {
    if (e.name === "AbortError") {
      status(tokens + " tokens · stopped");
      note(out, "stopped");
    } else {
      status("");
      if (conv === history) bubble("error", "Error: " + e.message);
    }
  } finally {
    out.classList.remove("streaming");
    // A partial answer stays in the history (as after Stop in a terminal chat); a question
    // with no answer at all is dropped so that turns keep alternating.
    // After New chat, `conv` is the old conversation, no longer shown or sent.
    if (answer) conv.push({ role: "assistant", content: answer });
    else conv.pop();
    if (controller === mine) {
      controller = null;
      setGenerating(false);
    }
  }
}

function stop() {
  if (controller) controller.abort();
}

function autosize() {
  input.style.height = "auto";
  input.style.height = Math.min(input.scrollHeight, 192) + "px";
  input.style.overflowY = input.scrollHeight > 192 ? "auto" : "hidden";
}

$("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
stopBtn.addEventListener("click", stop);
input.addEventListener("input", autosize);
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
});
document.addEventListener("keydown", (e) => { if (e.key === "Escape") stop(); });
$("temperature").addEventListener("input", () => { $("temp-value").textContent = $("temperature").value; });
$("settings-toggle").addEventListener("click", () => {
  const s = $("settings");
  s.hidden = !s.hidden;
  $("settings-toggle").setAttribute("aria-expanded", String(!s.hidden));
});
$("new-chat").addEventListener("click", () => {
  // The answer in progress (if any) is aborted and stays with the old conversation: its turn
  // ends asynchronously, after this, and must not reach the new one's history or status line.
  stop();
  controller = null;
  history = [];
  log.replaceChildren();
  statusEl.textContent = "";
  setGenerating(false);
});
setGenerating(false);
loadModel();
