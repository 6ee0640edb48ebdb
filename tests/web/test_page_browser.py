"""The chat page in headless Chromium against the real daemon: a two-turn conversation through
the page's own UI code (#selftest: fill the input, click Send, wait for the stream, twice)
streams each reply in many chunks into one server-side session that holds both turns; a reload
continues the same session; the API key prompt; Stop (the server cancels) and New conversation
(the old session is deleted); a phone-width layout. No CSP violation or script error anywhere."""
import http.client
import json
import threading
import time

import xlharness as X

RESULT = "(document.getElementById('selftest-result') || {}).textContent"



def logged_chats(d, ok=1, timeout=20):
    """The access log's /v1/chat/completions lines once `ok` of them answered 200: a request's
    line is written when its connection completes, which can be just after the page saw the
    whole reply."""
    deadline = time.monotonic() + timeout
    while True:
        chats = [l for l in d.requests_logged() if l["path"] == "/v1/chat/completions"]
        if sum(l["status"] == 200 for l in chats) >= ok or time.monotonic() > deadline:
            return chats
        time.sleep(0.02)

def selftest(page, port, path="/"):
    page.navigate("http://127.0.0.1:%d%s#selftest" % (port, path))
    return json.loads(page.wait_for(RESULT, timeout=60))


def idle(page):
    """Waits until the page's turn is over (Send enabled again)."""
    page.wait_for("!document.getElementById('send').disabled", timeout=60)


def send_with_enter(page, text):
    """Types into the input and presses Enter (the keyboard path), as a user would."""
    page.eval("""(() => { const i = document.getElementById('input'); i.focus();
                          i.value = %s; })()""" % json.dumps(text))
    for t in ("rawKeyDown", "keyUp"):
        page.call("Input.dispatchKeyEvent", {"type": t, "key": "Enter", "code": "Enter",
                                             "windowsVirtualKeyCode": 13})
    # the key events are acknowledged once handled: the turn has started (or already failed)


def test_two_turns_stream_into_one_session(start_daemon, tiny_model, page, shots):
    d = start_daemon(tiny_model)
    r = selftest(page, d.port)
    assert r["ok"], r
    t1, t2 = r["turns"]
    sid = r["session_id"]
    assert len(sid) == 32 and r["stored_session"] == sid        # kept in localStorage
    for t in (t1, t2):
        assert t["ok"] and t["chunks"] > 1, t                   # streamed, token by token
        assert t["sent_session"] == sid and t["session_id"] == sid
        assert t["finish"] == "length" and len(t["text"]) > 0
    assert 0 < t1["session_tokens"] < t2["session_tokens"]
    s = r["session"]                                            # as the page saw it
    assert s["id"] == sid and s["turns"] == 2 and s["tokens"] == t2["session_tokens"]
    st, s = X.get_session(d.port, sid, prefix=d.prefix)     # and as the server has it
    assert st == 200 and s["turns"] == 2 and s["messages"] == 4 and s["mode"] == "chat"
    assert s["tokens"] == t2["session_tokens"] and not s["busy"]
    assert r["bubbles"] == 2
    texts = page.eval("[...document.querySelectorAll('#log .msg.assistant .text')]"
                      ".map(e => e.textContent)")
    assert texts == [t1["text"], t2["text"]]
    chats = logged_chats(d, 2)
    assert [l["session"] for l in chats] == [sid, sid] and all(l["status"] == 200 for l in chats)
    shots(page, "conversation")

    # a reload shows the conversation and continues the same session (only the new message)
    page.navigate("http://127.0.0.1:%d/" % d.port)
    page.wait_for("document.getElementById('sub').textContent.includes('remembers %d')"
                  % s["tokens"])
    assert page.eval("document.querySelectorAll('#log .msg').length") == 4
    send_with_enter(page, "Pray, go on.")
    idle(page)
    st, s3 = X.get_session(d.port, sid, prefix=d.prefix)
    assert st == 200 and s3["turns"] == 3 and s3["tokens"] > s["tokens"]
    assert page.eval("document.querySelectorAll('#log .msg.assistant').length") == 3
    assert page.problems() == []


def test_shift_enter_is_a_newline(start_daemon, tiny_model, page):
    d = start_daemon(tiny_model)
    page.navigate("http://127.0.0.1:%d/" % d.port)
    page.eval("document.getElementById('input').focus()")
    page.call("Input.insertText", {"text": "line one"})
    page.call("Input.dispatchKeyEvent", {"type": "rawKeyDown", "key": "Enter", "code": "Enter",
                                         "windowsVirtualKeyCode": 13, "modifiers": 8})
    page.call("Input.dispatchKeyEvent", {"type": "char", "key": "Enter", "text": "\r",
                                         "modifiers": 8})
    page.call("Input.insertText", {"text": "line two"})
    assert page.eval("document.getElementById('input').value") == "line one\nline two"
    assert page.eval("document.querySelectorAll('#log .msg').length") == 0   # nothing sent
    assert not [l for l in d.requests_logged() if l["path"] not in ("/", "/health")]


def test_api_key_prompt(start_daemon, tiny_model, page):
    d = start_daemon(tiny_model, "--api-keys", "k1")
    page.navigate("http://127.0.0.1:%d/" % d.port)
    send_with_enter(page, "Is anyone there?")
    err = page.wait_for("(document.querySelector('#log .msg.error') || {}).textContent")
    idle(page)
    assert "API key" in err
    assert page.eval("document.getElementById('settings').open") is True
    assert page.eval("document.activeElement.id") == "api-key"
    # the message is back in the input, not lost; nothing was shown as sent
    assert page.eval("document.getElementById('input').value") == "Is anyone there?"
    assert page.eval("document.querySelectorAll('#log .msg.user').length") == 0
    page.eval("document.getElementById('api-key').value = 'k1'; "
              "document.getElementById('save-key').click()")
    page.eval("document.getElementById('send').click()")
    idle(page)
    sid = page.eval("localStorage.getItem('xlserve:/:session')")
    assert sid
    st, s = X.get_session(d.port, sid, {"Authorization": "Bearer k1"}, prefix=d.prefix)
    assert st == 200 and s["turns"] == 1
    assert page.eval("document.querySelectorAll('#log .msg.assistant').length") == 1
    # the session belongs to the key: the page sent it with every call
    assert [l["status"] for l in logged_chats(d)] == [200]
    assert [p for p in page.problems() if "401" not in p] == []   # the 401 itself is logged


def test_stop_then_new_conversation(start_daemon, tiny_model, page, shots):
    d = start_daemon(tiny_model, "--max-tokens-limit", "1000000")
    page.navigate("http://127.0.0.1:%d/" % d.port)
    # long enough (seconds) to outlast the browser's reaction on a loaded machine
    page.eval("document.getElementById('max-tokens').value = '900000'")
    # click Stop from inside the page as soon as the first chunk shows
    page.eval("""new Promise((resolve) => {
        const log = document.getElementById('log');
        const ob = new MutationObserver(() => {
          const t = document.querySelector('#log .msg.assistant .text');
          if (t && t.textContent.length) { ob.disconnect();
                                           document.getElementById('stop').click(); resolve(); }
        });
        ob.observe(log, {subtree: true, childList: true, characterData: true});
        document.getElementById('input').value = 'Tell me a very long story.';
        document.getElementById('send').click();
      })""")
    idle(page)
    assert page.eval("document.querySelector('#log .msg.assistant .note').textContent") \
        == "stopped"
    sid = page.eval("localStorage.getItem('xlserve:/:session')")
    d.wait_log(lambda o: o.get("path") == "/v1/chat/completions" and o.get("client_gone"))
    st, s = X.get_session(d.port, sid, prefix=d.prefix)
    assert st == 200 and s["tokens"] < 900000 and not s["busy"]
    # the header catches up with what the server kept of the cut turn
    page.wait_for("document.getElementById('sub').textContent.includes('remembers %d')"
                  % s["tokens"])
    shots(page, "stopped")
    # New conversation: the old session is deleted, a new one minted and stored
    page.eval("document.getElementById('new').click()")
    page.wait_for("(localStorage.getItem('xlserve:/:session') || %s) !== %s"
                  % (json.dumps(sid), json.dumps(sid)))
    new = page.eval("localStorage.getItem('xlserve:/:session')")
    assert new and new != sid
    assert X.get_session(d.port, sid, prefix=d.prefix)[0] == 404
    assert X.get_session(d.port, new, prefix=d.prefix)[0] == 200
    assert page.eval("document.querySelectorAll('#log .msg').length") == 0
    assert page.problems() == []


def test_path_prefix_and_phone_width(start_daemon, tiny_model, browser, shots):
    d = start_daemon(tiny_model, "--path-prefix", "/xl", prefix="/xl")
    p = browser.page(width=390, height=844, mobile=True)
    try:
        r = selftest(p, d.port, "/xl/")
        assert r["ok"], r
        assert X.get_session(d.port, r["session_id"], prefix=d.prefix)[1]["turns"] == 2
        # nothing wider than the phone; the composer is on screen
        assert p.eval("document.documentElement.scrollWidth") <= 390
        box = p.eval("JSON.stringify(document.getElementById('send').getBoundingClientRect())")
        box = json.loads(box)
        assert box["right"] <= 390 and box["bottom"] <= 844
        shots(p, "phone")
        assert p.problems() == []
    finally:
        p.close()


def start_turn_and_wait_first_chunk(page, text, max_tokens):
    """Sends text from the page and resolves once the reply's first chunk is on screen."""
    page.eval("document.getElementById('max-tokens').value = '%d'" % max_tokens)
    page.eval("""new Promise((resolve) => {
        const ob = new MutationObserver(() => {
          const t = document.querySelector('#log .msg.assistant:last-child .text');
          if (t && t.textContent.length) { ob.disconnect(); resolve(); }
        });
        ob.observe(document.getElementById('log'),
                   {subtree: true, childList: true, characterData: true});
        document.getElementById('input').value = %s;
        document.getElementById('send').click();
      })""" % json.dumps(text))


def test_in_band_error_is_shown(start_daemon, tiny_model, page):
    """SIGTERM with drain_timeout 0 cuts the stream with an in-band shutting_down error."""
    d = start_daemon(tiny_model, "--max-tokens-limit", "1000000", "--drain-timeout", "0")
    page.navigate("http://127.0.0.1:%d/" % d.port)
    start_turn_and_wait_first_chunk(page, "Once upon a time", 900000)
    d.signal(15)
    idle(page)
    err = page.eval("document.querySelector('#log .msg.error').textContent")
    assert "shutting_down" in err, err
    assert page.eval("document.querySelector('#log .msg.assistant .note').textContent") \
        == "interrupted"
    assert page.eval("document.querySelector('#log .msg.assistant .text').textContent")
    assert d.wait_exit(20) == 0


def long_stream(d, sid=None):
    """A long generation from Python (optionally in session sid): returns its open connection
    once the first token arrived; closing it cancels the generation. A thread keeps reading the
    stream, so the generation keeps its running slot (an unread stream pauses and gives its
    slot up once its buffer fills)."""
    c = d.conn()
    h = {"Content-Type": "application/json"}
    if sid:
        h["X-Session-Id"] = sid
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "x", "max_tokens": 900000, "stream": True}).encode(), headers=h)
    r = c.getresponse()
    assert r.status == 200
    X.read_sse(r, on_event=lambda data: False)

    def drain():
        try:
            while r.read(4096):
                pass
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            pass  # the connection was closed by the test

    threading.Thread(target=drain, daemon=True).start()
    return c


def slot_holder(d):
    """A long non-streaming generation from Python that holds the running slot: returns its open
    connection once it runs; closing it cancels the generation. (A stream read more slowly than
    it is generated pauses and gives its slot up, so a stream cannot hold the slot.)"""
    c = d.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "x", "max_tokens": 900000}).encode(),
        headers={"Content-Type": "application/json"})
    X.wait_until(lambda: X.metric(d.port, "xlserve_running") == 1, what="the slot holder to run")
    return c


def test_retries_when_the_server_is_full(start_daemon, tiny_model, page):
    """429 (max_running 1, max_queue 0): the page waits Retry-After and sends again."""
    d = start_daemon(tiny_model, "--max-tokens-limit", "1000000", "--max-running", "1",
                     "--max-queue", "0")
    page.navigate("http://127.0.0.1:%d/" % d.port)
    c = slot_holder(d)
    page.eval("document.getElementById('max-tokens').value = '16'; "
              "document.getElementById('input').value = 'May I?'; "
              "document.getElementById('send').click()")
    page.wait_for("document.getElementById('status').textContent.includes('retrying')")
    c.close()                                          # the other generation goes away
    idle(page)
    assert page.eval("document.querySelectorAll('#log .msg.error').length") == 0
    assert page.eval("document.querySelectorAll('#log .msg.assistant').length") == 1
    chats = [l["status"] for l in logged_chats(d)]
    assert chats[0] == 429 and chats[-1] == 200
    assert [p for p in page.problems() if "429" not in p] == []


def test_retries_while_the_session_is_busy(start_daemon, tiny_model, page):
    """409 session_busy (another client is using the page's session): the page retries."""
    d = start_daemon(tiny_model, "--max-tokens-limit", "1000000")
    page.navigate("http://127.0.0.1:%d/" % d.port)
    page.eval("document.getElementById('new').click()")
    sid = page.wait_for("localStorage.getItem('xlserve:/:session')")
    c = long_stream(d, sid)
    page.eval("document.getElementById('max-tokens').value = '16'; "
              "document.getElementById('input').value = 'Are you there?'; "
              "document.getElementById('send').click()")
    page.wait_for("document.getElementById('status').textContent.includes('busy')")
    c.close()
    idle(page)
    assert page.eval("document.querySelectorAll('#log .msg.error').length") == 0
    chats = [l["status"] for l in logged_chats(d)]
    assert chats[0] == 409 and chats[-1] == 200
    st, s = X.get_session(d.port, sid, prefix=d.prefix)
    assert st == 200 and s["turns"] == 2   # the other client's completion, then the page's turn


def test_waits_in_the_queue_with_pings(start_daemon, tiny_model, page):
    """A turn queued behind another generation gets ': ping' comments, shown as waiting."""
    d = start_daemon(tiny_model, "--max-tokens-limit", "1000000", "--max-running", "1",
                     "--max-queue", "4", "--ping-interval", "1")
    page.navigate("http://127.0.0.1:%d/" % d.port)
    c = slot_holder(d)
    page.eval("document.getElementById('max-tokens').value = '16'; "
              "document.getElementById('input').value = 'After you.'; "
              "document.getElementById('send').click()")
    page.wait_for("document.getElementById('status').textContent.includes('Waiting')")
    assert page.eval("document.querySelector('#log .msg.assistant .text').textContent") == ""
    c.close()
    idle(page)
    assert page.eval("document.querySelectorAll('#log .msg.error').length") == 0
    assert page.eval("document.querySelector('#log .msg.assistant .text').textContent")
    chats = logged_chats(d)
    assert [l["status"] for l in chats] == [200] and chats[0]["queue_ms"] >= 900
    assert page.problems() == []
