"""The chat page at / in a real headless browser (Debian's chromium + chromedriver, driven by
Selenium) against a real `ember serve` on the default model (SmolLM2-135M-Instruct).

- a question gets a streamed answer naming Paris;
- Stop during a long answer stops the engine, not just the rendering: within a second
  ember_active_sequences is 0 and a client cancellation is counted; the next question works;
- a screenshot of the page mid-answer goes to the test's output folder (web_ui_mid_answer.png);
- New chat during an answer leaves that answer with the old conversation: the next question is
  sent alone, and the status line is blank.
"""
import os
import shutil
import sys
import time

import pytest

from conftest import Server, request, wait_for

pytestmark = pytest.mark.heavy  # a real browser against the page

try:
    import selenium  # noqa: F401
except ImportError:  # Debian's python3-selenium serves the system python; this one may differ
    sys.path.append("/usr/lib/python3/dist-packages")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def server(ember):
    s = Server(ember, "default")
    try:
        s.wait_ready(120)
        yield s
    finally:
        s.stop()


@pytest.fixture
def browser():
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1100,800"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield d
    finally:
        d.quit()


def state(d):
    return d.find_element(By.TAG_NAME, "body").get_attribute("data-state")


def answers(d):
    return [e.text for e in d.find_elements(By.CSS_SELECTOR, ".msg.assistant")]


def ask(d, text):
    box = d.find_element(By.ID, "input")
    box.click()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def set_controls(d, temperature, max_tokens):
    d.execute_script(
        "const t = document.getElementById('temperature'); t.value = arguments[0];"
        "t.dispatchEvent(new Event('input'));"
        "document.getElementById('max-tokens').value = arguments[1];", temperature, max_tokens)


def test_chat_page_streams_an_answer_and_stop_cancels_the_engine(server, browser, tmp_path):
    d = browser
    d.get(server.base + "/")
    wait_for(lambda: d.find_element(By.ID, "model").text != "", 10, what="model name shown")
    set_controls(d, 0, 64)

    # A question: the answer streams in and names Paris.
    ask(d, "What is the capital of France?")
    # The answer's bubble appears as the request goes out. A short answer can start and finish
    # between two polls of the page's state, so this one waits for the bubble and then for the
    # page to be idle again with the answer in it (the long answer below is watched streaming).
    wait_for(lambda: len(answers(d)) >= 1, 10, what="the answer's bubble")
    wait_for(lambda: state(d) == "idle" and "Paris" in answers(d)[-1], 60,
             what="the answer, naming Paris")
    assert "tok/s" in d.find_element(By.ID, "status").text

    # A long answer: watch it grow (streaming), screenshot it mid-answer, then press Stop.
    set_controls(d, 0, 2000)
    ask(d, "Write a very long story about a dragon who learns to bake bread.")
    lengths = set()

    def grown():
        lengths.add(len(answers(d)[-1]))
        return len([n for n in lengths if n > 0]) >= 3 and max(lengths) > 80

    wait_for(grown, 60, interval=0.05, what="streamed text")
    assert state(d) == "generating"
    assert server.metric("ember_active_sequences") == 1
    shot = tmp_path / "web_ui_mid_answer.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size > 10000
    if os.environ.get("EMBER_SCREENSHOT_DIR"):  # for docs/: where the committed copy comes from
        shutil.copy(shot, os.path.join(os.environ["EMBER_SCREENSHOT_DIR"], shot.name))

    before = server.metric("ember_cancellations_total", cause="client")
    tokens_before = server.metric("ember_generated_tokens_total")
    d.find_element(By.ID, "stop").click()
    t0 = time.monotonic()
    wait_for(lambda: server.metric("ember_active_sequences") == 0
             and server.metric("ember_cancellations_total", cause="client") == before + 1,
             1.0, interval=0.01, what="engine cancelled after Stop")
    elapsed = time.monotonic() - t0
    wait_for(lambda: state(d) == "idle", 5, what="page back to idle")
    assert "stopped" in answers(d)[-1]
    # The engine really stopped: no more tokens are generated afterwards.
    stopped_at = server.metric("ember_generated_tokens_total")
    assert stopped_at - tokens_before < 200
    time.sleep(0.3)
    assert server.metric("ember_generated_tokens_total") == stopped_at
    print(f"stop observed by the engine within {elapsed * 1000:.0f} ms")

    # The next question still works, in a fresh conversation.
    d.find_element(By.ID, "new-chat").click()
    set_controls(d, 0, 64)
    ask(d, "What is the capital of France?")
    # The answer's bubble appears as the request goes out. A short answer can start and finish
    # between two polls of the page's state, so this one waits for the bubble and then for the
    # page to be idle again with the answer in it (the long answer below is watched streaming).
    wait_for(lambda: len(answers(d)) >= 1, 10, what="the answer's bubble")
    wait_for(lambda: state(d) == "idle" and "Paris" in answers(d)[-1], 60,
             what="the answer, naming Paris")


def record_requests(d):
    """Wraps the page's fetch so that every request body it sends is kept in window.sent."""
    d.execute_script(
        "window.sent = []; const f = window.fetch;"
        "window.fetch = (url, opts) => {"
        "  if (opts && opts.body) window.sent.push(JSON.parse(opts.body));"
        "  return f(url, opts); };")


def test_new_chat_during_an_answer_starts_a_clean_conversation(server, browser):
    d = browser
    d.get(server.base + "/")
    wait_for(lambda: d.find_element(By.ID, "model").text != "", 10, what="model name shown")
    record_requests(d)
    set_controls(d, 0, 2000)
    before = server.metric("ember_cancellations_total", cause="client")
    ask(d, "Write a very long story about a dragon who learns to bake bread.")
    wait_for(lambda: answers(d) and len(answers(d)[-1]) > 40, 60, what="streamed text")
    # The click's handler aborts the fetch; the aborted turn's catch and finally run as soon as
    # the handler returns (the read's rejection is already queued), before WebDriver answers.
    d.find_element(By.ID, "new-chat").click()
    assert state(d) == "idle"
    assert d.find_element(By.ID, "status").text == ""
    assert answers(d) == [] and not d.find_elements(By.CSS_SELECTOR, ".msg")
    wait_for(lambda: server.metric("ember_cancellations_total", cause="client") == before + 1
             and server.metric("ember_active_sequences") == 0, 2, what="engine cancelled")

    set_controls(d, 0, 64)
    ask(d, "What is the capital of France?")
    wait_for(lambda: len(answers(d)) >= 1, 10, what="the answer's bubble")
    wait_for(lambda: state(d) == "idle" and "Paris" in answers(d)[-1], 60,
             what="the answer, naming Paris")
    sent = d.execute_script("return window.sent")
    assert len(sent) == 2, sent
    turns = [m for m in sent[1]["messages"] if m["role"] != "system"]
    assert turns == [{"role": "user", "content": "What is the capital of France?"}], turns
    assert len(answers(d)) == 1 and "stopped" not in d.find_element(By.ID, "status").text


def test_escape_stops_and_shift_enter_is_a_newline(server, browser):
    d = browser
    d.get(server.base + "/")
    set_controls(d, 0, 2000)
    box = d.find_element(By.ID, "input")
    box.send_keys("Tell me a long story.")
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    box.send_keys("Make it about the sea.")
    assert box.get_attribute("value") == "Tell me a long story.\nMake it about the sea."
    assert state(d) == "idle"
    before = server.metric("ember_cancellations_total", cause="client")
    box.send_keys(Keys.ENTER)
    wait_for(lambda: len(answers(d)[-1]) > 20, 60, what="answer text")
    box.send_keys(Keys.ESCAPE)
    wait_for(lambda: server.metric("ember_cancellations_total", cause="client") == before + 1
             and server.metric("ember_active_sequences") == 0, 2, what="cancel after Escape")
    wait_for(lambda: state(d) == "idle", 5, what="idle")


def test_page_asks_for_the_api_key(ember, browser):
    s = Server(ember, "default", "--api-key", "sesame")
    try:
        s.wait_ready(120)
        d = browser
        d.get(s.base + "/")
        wait_for(lambda: d.find_element(By.ID, "key-dialog").get_attribute("open") is not None, 10,
                 what="API key dialog")
        d.find_element(By.ID, "key").send_keys("sesame")
        d.find_element(By.ID, "key-ok").click()
        wait_for(lambda: d.find_element(By.ID, "model").text != "", 10, what="models with the key")
        set_controls(d, 0, 16)
        ask(d, "Hi")
        wait_for(lambda: state(d) == "idle" and answers(d) and answers(d)[-1], 60, what="answer")
        assert not d.find_elements(By.CSS_SELECTOR, ".msg.error")
    finally:
        s.stop()


def test_no_web_ui_turns_the_page_off(ember, models):
    s = Server(ember, models["small"], "--no-web-ui")
    try:
        status, _, _ = request(s.port, "GET", "/")
        assert status == 404
    finally:
        s.stop()
    s = Server(ember, models["small"])
    try:
        status, headers, body = request(s.port, "GET", "/")
        assert status == 200 and b"<title>ember chat</title>" in body
        status, _, body = request(s.port, "GET", "/app.js")
        assert status == 200 and b"AbortController" in body
    finally:
        s.stop()
