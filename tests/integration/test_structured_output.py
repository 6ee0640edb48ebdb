"""Structured output over real HTTP: response_format json_object / json_schema (and the
json_schema / guided_json aliases) constrain decoding so that every reply parses as JSON and
validates against its schema. 200 seeded generations per schema, sampled at temperature 1 on
the tiny random byte-level model (which knows nothing about JSON: the constraint does all the
work), each checked by the validator below (written here, independent of the server).

The schemas under tests/schemas (what zod 4 and pydantic v2 emit for realistic models) are all
accepted, and seeded generations of the bundled model (models/austen-byte, temperature 1) for
each, and 20 generations of the tiny random model (which reaches the corners), are validated by
ajv (tests/clients/validate_schemas.mjs, pinned in tests/clients): skipped
with the reason when node or npm is missing, unless XL_REQUIRE_NODE=1 (CI), where that fails.
Each refusal (unsupported keyword, contradiction) is a 400 whose param names the keyword's path."""
import glob
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

import xlharness as X

# ---- a validator of the schema subset (JSON Schema semantics) ----


def _resolve(ref, root):
    assert ref.startswith("#/")
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _type_ok(v, t):
    return {"null": v is None,
            "boolean": isinstance(v, bool),
            "integer": isinstance(v, int) and not isinstance(v, bool),
            "number": isinstance(v, (int, float)) and not isinstance(v, bool),
            "string": isinstance(v, str),
            "array": isinstance(v, list),
            "object": isinstance(v, dict)}[t]


def validate(v, s, root=None):
    """Returns None when v validates against s, else a reason."""
    root = s if root is None else root
    if "$ref" in s:
        return validate(v, _resolve(s["$ref"], root), root)
    for kw in ("anyOf", "oneOf"):
        if kw in s:
            ok = [validate(v, b, root) is None for b in s[kw]]
            if (kw == "anyOf" and any(ok)) or (kw == "oneOf" and sum(ok) == 1):
                return None
            return f"{v!r} matches no branch of {kw}"
    if "const" in s and not (v == s["const"] and type(v) is type(s["const"])):
        return f"{v!r} != const {s['const']!r}"
    if "enum" in s and not any(v == e and type(v) is type(e) for e in s["enum"]):
        return f"{v!r} not in enum"
    if "type" in s:
        ts = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_type_ok(v, t) for t in ts):
            return f"{v!r} is not of type {ts}"
    if isinstance(v, str):
        # JSON Schema counts code points (len); JavaScript validators (Zod) count UTF-16 units:
        # the server promises both (maxLength in units, minLength in code points)
        units = len(v.encode("utf-16-le")) // 2
        if max(len(v), units) > s.get("maxLength", 1 << 60) or len(v) < s.get("minLength", 0):
            return f"string length {len(v)} ({units} UTF-16 units) out of range"
    if isinstance(v, list):
        if len(v) > s.get("maxItems", 1 << 60) or len(v) < s.get("minItems", 0):
            return f"array length {len(v)} out of range"
        for x in v:
            if "items" in s and (r := validate(x, s["items"], root)):
                return r
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                return f"missing required {k!r}"
        for k, x in v.items():
            if k in props:
                if r := validate(x, props[k], root):
                    return r
            elif s.get("additionalProperties") is False:
                return f"unexpected property {k!r}"
    return None


# ---- schemas: the subset clients send (Pydantic / Zod shapes) ----

PERSON = {"type": "object", "additionalProperties": False,
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer"},
                         "email": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]}},
          "required": ["name", "age", "email"]}
ORDER = {"type": "object", "additionalProperties": False,
         "properties": {"id": {"type": "integer"},
                        "status": {"enum": ["new", "paid", "shipped"]},
                        "items": {"type": "array", "minItems": 1, "maxItems": 3,
                                  "items": {"type": "object", "additionalProperties": False,
                                            "properties": {"sku": {"type": "string", "maxLength": 6},
                                                           "qty": {"type": "integer"},
                                                           "price": {"type": "number"}},
                                            "required": ["sku", "qty", "price"]}},
                        "gift": {"type": "boolean"},
                        "kind": {"const": "order"}},
         "required": ["id", "status", "items", "kind"]}
REFS = {"$defs": {"Point": {"type": "object", "additionalProperties": False,
                            "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"]}},
        "type": "object", "additionalProperties": False,
        "properties": {"path": {"type": "array", "items": {"$ref": "#/$defs/Point"}, "maxItems": 4},
                       "closed": {"type": ["boolean", "null"]}},
        "required": ["path", "closed"]}
NESTED = {"type": "object", "additionalProperties": False,
          "properties": {"a": {"type": "object", "additionalProperties": False,
                               "properties": {"b": {"type": "object", "additionalProperties": False,
                                                    "properties": {"c": {"type": "array", "maxItems": 3,
                                                                         "items": {"type": "integer"}}},
                                                    "required": ["c"]}},
                               "required": ["b"]},
                         "tag": {"type": "string", "minLength": 2, "maxLength": 4}},
          "required": ["a", "tag"]}
SCALARS = {"type": "array", "maxItems": 6,
           "items": {"type": ["string", "number", "boolean", "null"], "maxLength": 5}}

SCHEMAS = {"person": PERSON, "order": ORDER, "refs": REFS, "nested": NESTED, "scalars": SCALARS}
N_PER_SCHEMA = int(os.environ.get("XL_STRUCTURED_N", "200"))


def rf(name, schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


def completion(port, seed, **fields):
    body = dict(prompt="Record:", max_tokens=3000, temperature=1.0, seed=seed)
    body.update(fields)
    st, h, b = X.post_json(port, "/v1/completions", body, timeout=120)
    assert st == 200, b
    return b["choices"][0]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_seeded_generation_parses_and_validates(daemon, name):
    schema = SCHEMAS[name]

    def one(seed):
        c = completion(daemon.port, seed, response_format=rf(name, schema))
        return seed, c["finish_reason"], c["text"]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(N_PER_SCHEMA)))
    texts = set()
    for seed, finish, text in results:
        assert finish == "stop", (seed, finish, text)  # ended because the document was complete
        v = json.loads(text)
        assert validate(v, schema) is None, (seed, text, validate(v, schema))
        texts.add(text)
    print(f"structured output {name}: {len(results)} seeded generations, all finished 'stop', "
          f"parsed and validated; {len(texts)} distinct")
    assert len(results) == N_PER_SCHEMA
    assert len(texts) > N_PER_SCHEMA // 2  # sampled, not one answer repeated


def test_chat_json_object_is_an_object_and_greedy_works(daemon):
    """json_object: any JSON object. The random model's strings would run on for ever (it
    favours lower-case letters and never learnt to close a quote), so a logit_bias on '"' and
    '}' (applied before the mask) lets documents end; 20 seeds and greedy."""
    for temp, seed in [(0, 0)] + [(0.8, s) for s in range(20)]:
        st, h, b = X.post_json(daemon.port, "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "Answer in JSON."}],
                                "response_format": {"type": "json_object"}, "max_tokens": 3000,
                                "temperature": temp, "seed": seed,
                                "logit_bias": {str(ord('"')): 6, str(ord("}")): 6}})
        assert st == 200, b
        c = b["choices"][0]
        assert c["finish_reason"] == "stop"
        assert isinstance(json.loads(c["message"]["content"]), dict)


def test_aliases_constrain_the_same_way(daemon):
    """llama.cpp's json_schema field, vLLM's guided_json (object or string) and llama.cpp's
    response_format json_object + schema give the same text as response_format json_schema."""
    want = completion(daemon.port, 11, response_format=rf("p", PERSON))["text"]
    assert completion(daemon.port, 11, json_schema=PERSON)["text"] == want
    assert completion(daemon.port, 11, guided_json=PERSON)["text"] == want
    assert completion(daemon.port, 11, guided_json=json.dumps(PERSON))["text"] == want
    assert completion(daemon.port, 11, response_format={"type": "json_object",
                                                        "schema": PERSON})["text"] == want


def test_max_tokens_before_the_end_says_length(daemon):
    c = completion(daemon.port, 3, response_format=rf("o", ORDER), max_tokens=5)
    assert c["finish_reason"] == "length" and len(c["text"].encode()) == 5
    assert ORDER["required"] and c["text"].startswith("{")


def test_streamed_output_parses(daemon):
    st, h, ev = X.stream(daemon.port, "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "x"}], "stream": True,
                          "max_tokens": 3000, "seed": 2, "response_format": rf("n", NESTED)})
    assert st == 200
    chunks = X.sse_json(ev)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert validate(json.loads(text), NESTED) is None


@pytest.mark.parametrize("fields,param", [
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": rf("x", {"type": "string", "pattern": "^(?!a)"})},
     "response_format.json_schema.schema.pattern"),
    ({"response_format": rf("x", {"type": "integer", "minimum": 5, "maximum": 1})},
     "response_format.json_schema.schema"),
    ({"json_schema": {"type": "object", "required": ["a"]}}, "json_schema.required"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_json": PERSON, "response_format": {"type": "json_object"}}, "guided_json"),
])
def test_bad_or_unsupported_schemas_are_refused(daemon, fields, param):
    st, h, b = X.post_json(daemon.port, "/v1/completions", dict(prompt="a", **fields))
    assert st == 400, b
    assert b["error"]["param"] == param and b["error"]["code"] == "invalid_value", b


def test_word_level_model_is_refused(start_daemon, tiny_model, tmp_path):
    dm = start_daemon(X.write_tiny_word_model(tmp_path / "words"))
    st, h, b = X.post_json(dm.port, "/v1/completions",
                           {"prompt": "w1 w2", "response_format": {"type": "json_object"}})
    assert st == 400 and b["error"]["param"] == "response_format", b
    assert "byte-level" in b["error"]["message"]
    st, h, b = X.post_json(dm.port, "/v1/completions", {"prompt": "w1 w2", "max_tokens": 2})
    assert st == 200, b


# ---- every construct refused or contradictory: 400, param naming the keyword's path ----

REFUSED = [
    ({"type": []}, ".type"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": []}}}},
     ".properties.a.items.type"),
    ({"type": "integer", "enum": ["a"]}, ".enum[0]"),
    ({"type": "string", "const": 5}, ".const"),
    ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3, "const": 4}}},
     ".properties.n.const"),
    ({"type": "string", "pattern": "(a)\\1"}, ".pattern"),
    ({"type": "string", "pattern": "^(?<=a)b"}, ".pattern"),
    ({"type": "string", "pattern": "\\bword"}, ".pattern"),
    ({"type": "string", "pattern": "x{1000}"}, ".pattern"),
    ({"type": "string", "format": "hostname"}, ".format"),
    ({"type": "string", "format": "email", "pattern": "^\\d+$"}, ""),
    ({"type": "number", "multipleOf": 0.5}, ".multipleOf"),
    ({"type": "integer", "minimum": 2, "maximum": 3, "multipleOf": 5}, ""),
    ({"type": "array", "items": False, "prefixItems": [{}], "minItems": 2}, ".minItems"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, ".uniqueItems"),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, ".propertyNames.pattern"),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"],
      "maxProperties": 1}, ".maxProperties"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, ".oneOf[1]"),
    ({"type": "object", "properties": {"x": {"not": {"type": "null"}}}}, ".properties.x.not"),
    ({"$defs": {"T": {"type": "object", "properties": {"c": {"$ref": "#/$defs/T"}},
                      "required": ["c"]}}, "$ref": "#/$defs/T"}, ""),  # no value ever ends
]


@pytest.mark.parametrize("schema,path", REFUSED, ids=[json.dumps(s)[:60] for s, _ in REFUSED])
def test_refusals_name_the_path(daemon, schema, path):
    st, h, b = X.post_json(daemon.port, "/v1/completions",
                           dict(prompt="a", response_format=rf("x", schema)))
    assert st == 400, b
    err = b["error"]
    assert err["code"] == "invalid_value", b
    assert err["param"] == "response_format.json_schema.schema" + path, b
    assert "schema" in err["message"], b


def test_type_empty_list_nested_in_the_alias_fields(daemon):
    for field in ("json_schema", "guided_json"):
        st, h, b = X.post_json(daemon.port, "/v1/completions",
                               {"prompt": "a", field: {"properties": {"v": {"type": []}}}})
        assert st == 400 and b["error"]["param"] == field + ".properties.v.type", b


# ---- the fixtures: accepted, and seeded generations of the bundled model validate with ajv ----

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schemas")
FIXTURES = sorted(glob.glob(os.path.join(SCHEMA_DIR, "*.json")))
# seeds per fixture (1 under a sanitizer build, where a generation is ten times slower)
def _seeds():
    return int(os.environ.get("XL_SCHEMA_SEEDS", "1" if X.binary_sanitizer() else "3"))


BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                       "austen-byte")


@pytest.fixture(scope="module")
def ajv(tmp_path_factory):
    """node and the pinned packages of tests/clients installed (shared with the client tests)."""
    return X.npm_clients(tmp_path_factory, "the ajv validation")


def _run_ajv(ajv, cases, tmp_path):
    node, dest = ajv
    f = tmp_path / "cases.json"
    f.write_text(json.dumps({"cases": cases}))
    r = subprocess.run([node, "validate_schemas.mjs", str(f)], cwd=dest, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-3000:]
    return r.returncode, json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bundled_daemon():
    if not os.path.exists(os.path.join(BUNDLED, "model.safetensors")):
        pytest.skip("the bundled model models/austen-byte is not in this checkout")
    d = X.Daemon(BUNDLED, ["--max-tokens-limit", "1000000"])
    yield d
    assert d.stop() == 0, d.tail()


def test_fixtures_are_realistic_and_many():
    names = [os.path.basename(f) for f in FIXTURES]
    assert len(names) >= 40, names
    assert sum(n.startswith("zod_") for n in names) >= 20
    assert sum(n.startswith("pydantic_") for n in names) >= 15


def test_every_fixture_is_accepted_and_its_generations_validate_with_ajv(bundled_daemon, ajv,
                                                                           tmp_path):
    def gen(job):
        path, seed = job
        schema = json.load(open(path))
        st, h, b = X.post_json(bundled_daemon.port, "/v1/completions",
                               {"prompt": "The record, as JSON:\n", "max_tokens": 6000,
                                "temperature": 1.0, "seed": seed,
                                "response_format": rf("fixture", schema)}, timeout=600)
        return path, seed, st, b

    seeds = _seeds()
    jobs = [(p, 100 + s) for p in FIXTURES for s in range(seeds)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(gen, jobs))
    outputs, refused, unfinished = {}, [], []
    for path, seed, st, b in results:
        name = os.path.basename(path)
        if st != 200:
            refused.append((name, b))
            continue
        c = b["choices"][0]
        if c["finish_reason"] != "stop":  # the document did not complete
            unfinished.append((name, seed, c["finish_reason"], c["text"][:300]))
        outputs.setdefault(name, []).append(c["text"])
    assert not refused, refused
    assert not unfinished, unfinished
    cases = [{"name": n, "schema": json.load(open(os.path.join(SCHEMA_DIR, n))), "outputs": o}
             for n, o in sorted(outputs.items())]
    # the validator can fail: a wrong output beside the real ones is caught
    cases.append({"name": "control", "schema": cases[0]["schema"], "outputs": ["{}", "[1]"]})
    rc, report = _run_ajv(ajv, cases, tmp_path)
    control = report.pop("control")
    assert control["validated"] == 0 and len(control["failures"]) == 2, control
    bad = {n: r["failures"][:2] for n, r in report.items() if r["failures"]}
    assert not bad, json.dumps(bad, indent=1)[:6000]
    total = sum(r["validated"] for r in report.values())
    print(f"\nschema fixtures: {len(report)} accepted; {total} generations "
          f"({seeds} seeds each) validated by ajv")
    for n, r in sorted(report.items()):
        print(f"  {n}: {r['validated']}/{seeds}")
    assert total == len(FIXTURES) * seeds


def test_random_model_walks_of_every_fixture_validate_with_ajv(daemon, ajv, tmp_path):
    """The tiny random model samples nearly uniformly among the allowed bytes: its generations
    reach corners the bundled model avoids (long numbers, odd characters, every enum value). A
    bias on '"' and '}' lets strings without maxLength and records end."""
    n = int(os.environ.get("XL_SCHEMA_RANDOM_SEEDS", "4" if X.binary_sanitizer() else "20"))

    def gen(job):
        path, seed = job
        st, h, b = X.post_json(daemon.port, "/v1/completions",
                               {"prompt": "{", "max_tokens": 20000, "temperature": 1.0,
                                "seed": seed, "logit_bias": {"34": 5, "125": 5},
                                "response_format": rf("fixture", json.load(open(path)))},
                               timeout=600)
        assert st == 200, (path, b)
        c = b["choices"][0]
        assert c["finish_reason"] == "stop", (path, seed, c["text"][:300])
        return os.path.basename(path), c["text"]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(gen, [(p, s) for p in FIXTURES for s in range(n)]))
    outputs = {}
    for name, text in results:
        outputs.setdefault(name, []).append(text)
    cases = [{"name": k, "schema": json.load(open(os.path.join(SCHEMA_DIR, k))), "outputs": o}
             for k, o in sorted(outputs.items())]
    rc, report = _run_ajv(ajv, cases, tmp_path)
    bad = {k: r["failures"][:2] for k, r in report.items() if r["failures"]}
    assert not bad, json.dumps(bad, indent=1)[:6000]
    assert sum(r["validated"] for r in report.values()) == len(FIXTURES) * n
    distinct = len({t for _, t in results})
    assert distinct > len(results) * 9 // 10, distinct  # sampled, not repeated
