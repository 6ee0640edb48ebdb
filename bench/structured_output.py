#!/usr/bin/python3
"""bench/structured_output.py: the cost of constrained decoding (response_format json_schema),
measured side by side in one run on one daemon: plain completions and schema-constrained ones
of the same length (2,000 tokens, temperature 1, seeds 0-4), alternating, and the ratio of the
median completion tokens/s. The schema (an array of at least 100,000 short strings) cannot end
within the request, so both sides generate exactly max_tokens tokens.

Usage: PYTHONPATH=tools /usr/bin/python3 bench/structured_output.py [MODEL_DIR]
(default: models/austen-byte; XLSERVE_BIN names the binary, default build/xlserve)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import xlharness as X  # noqa: E402

SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": {
    "type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 100000}}}


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "models/austen-byte"
    d = X.Daemon(model, ["--max-tokens-limit", "100000"])
    rates = {"plain": [], "json_schema": []}
    try:
        for rep in range(5):
            for kind in rates:
                body = dict(prompt="x", max_tokens=2000, temperature=1.0, seed=rep)
                if kind == "json_schema":
                    body["response_format"] = SCHEMA
                t = time.monotonic()
                b = X.complete(d.port, timeout=300, **body)
                dt = time.monotonic() - t
                assert b["usage"]["completion_tokens"] == 2000, b["usage"]
                rates[kind].append(2000 / dt)
    finally:
        d.stop()
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    for k, v in rates.items():
        print(f"{k:12s} " + " ".join(f"{x:8.0f}" for x in v) + f"   median {med[k]:.0f} tokens/s")
    print(f"json_schema / plain (medians): {med['json_schema'] / med['plain']:.3f}")


if __name__ == "__main__":
    main()
