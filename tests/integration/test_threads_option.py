"""The daemon's threads_per_worker (flag, XLSERVE_THREADS_PER_WORKER): the ready line names the
count, and the same requests (several at once, so decode steps are batched, and a session's
second turn) answer with the same tokens and the same log-probs, to the last bit, on 1 and on 2
threads per worker, with F32 weights and memory and with int8 weights and memory. The model is
big enough that every weight product and every decode step's attention is split over the
threads. A count outside 1..64 stops the daemon at start naming the option."""
import concurrent.futures
import os
import subprocess

import xlharness as X

PROMPTS = ["It is a truth universally", "Mr. Darcy", "She was", "The evening"]


def answers(port):
    """Greedy continuations with top-5 log-probs of PROMPTS, sent at once, then a second turn
    of a session."""
    def one(i):
        b = X.complete(port, prompt=PROMPTS[i], max_tokens=12, temperature=0, logprobs=5)
        c = b["choices"][0]
        return c["text"], c["logprobs"]["tokens"], c["logprobs"]["top_logprobs"]

    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
        out = list(ex.map(one, range(len(PROMPTS))))
    for turn in ("Once upon a time", " and then"):
        b = X.complete(port, sid="threads-sess", prompt=turn, max_tokens=8, temperature=0,
                       logprobs=3)
        c = b["choices"][0]
        out.append((c["text"], c["logprobs"]["tokens"], c["logprobs"]["top_logprobs"]))
    return out


def test_two_threads_answer_as_one(start_daemon, medium_model):
    for dtypes in ([], ["--weights", "int8", "--kv-dtype", "int8"]):
        runs = {}
        for n, args, env in ((1, [], None), (2, ["--threads-per-worker", "2"], None),
                             (3, [], {"XLSERVE_THREADS_PER_WORKER": "3"})):
            d = start_daemon(medium_model, "--workers", "1", *dtypes, *args, env=env)
            ev = d.wait_log(lambda o: o.get("event") == "ready")
            assert f"1 workers x {n} threads" in ev["msg"], ev
            runs[n] = answers(d.port)
            d.stop()
        assert all(text for text, _, _ in runs[1]), runs[1]
        assert runs[2] == runs[1], (dtypes, runs)  # bit for bit: floats compared exactly
        assert runs[3] == runs[1], (dtypes, runs)


def test_thread_count_out_of_range_is_refused(medium_model):
    e = {k: v for k, v in os.environ.items() if not k.startswith("XLSERVE_") or k == "XLSERVE_BIN"}
    for args, env in ((["--threads-per-worker", "0"], {}), ([], {"XLSERVE_THREADS_PER_WORKER": "65"})):
        r = subprocess.run([X.xlserve_bin(), "serve", "--model", medium_model, *args],
                           capture_output=True, text=True, env={**e, **env}, timeout=20)
        assert r.returncode in (1, 2), r
        assert "threads_per_worker" in r.stderr, r.stderr
