"""test_parity_reference.py: self-checks of the numpy reference and of the random-model generator.

Owns: (1) a second, differently written formulation in PyTorch float64 (batched segment,
relative-shift trick, triu/tril masks in the mask_len/mask_shift_len form, adaptive softmax by
gathering per target cluster) that must agree with the naive reference to 1e-9; (2) log-probs
summing to 1; (3) same_length making the reference independent of segmenting; (4) evidence
that the test models are discriminative: every stored tensor and every semantic option moves
the NLL by far more than the 1e-4 tolerance. Needs no engine.
"""
import math

import numpy as np
import pytest

import make_random_model as gen
import xl_reference
from parity_util import SEED

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

NAMES = list(gen.CONFIGS)


DTYPE = {"dtype": None}


def _t(a):
    return None if a is None else torch.as_tensor(np.asarray(a), dtype=DTYPE["dtype"])


def torch_eval_nll(ref, ids, tgt_len, dtype=None):
    """The same model, written the way the reference codes do it (shift trick, masks as
    triu + tril, per-cluster gather). Uses ref's resolved (tied) weights. dtype: float64 by
    default; float32 estimates the rounding error a float32 engine should show."""
    dtype = dtype or torch.float64
    DTYPE["dtype"] = dtype
    dm, H, D, M = ref.d_model, ref.n_head, ref.d_head, ref.mem_len
    ends = ref.ends
    emb = [_t(e) for e in ref.emb]
    emb_proj = [_t(p) for p in ref.emb_proj]
    layers = [{k: _t(v) for k, v in L.items()} for L in ref.layers]
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, dm, 2.0, dtype=dtype) / dm))

    def ln(x, g, b):
        return torch.nn.functional.layer_norm(x, (dm,), g, b, ref.eps)

    def embed(tok):
        out = torch.zeros(len(tok), dm, dtype=dtype)
        for c in range(len(emb)):
            lo = 0 if ref.div_val == 1 else ends[c]
            hi = ref.vocab if ref.div_val == 1 else ends[c + 1]
            sel = ((tok >= lo) & (tok < hi)).nonzero().flatten()
            if sel.numel() == 0:
                continue
            e = emb[c][tok[sel] - lo]
            if emb_proj[c] is not None:
                e = e @ emb_proj[c].t()
            out[sel] = e
        return out * math.sqrt(dm)

    def rel_shift(x):  # x: [qlen, klen, H]
        q, k = x.shape[0], x.shape[1]
        padded = torch.cat([torch.zeros(q, 1, H, dtype=x.dtype), x], dim=1)
        return padded.view(k + 1, q, H)[1:].reshape(q, k, H)

    def segment(tok, mems):
        qlen, mlen = len(tok), mems[0].shape[0]
        klen = mlen + qlen
        ones = torch.ones(qlen, klen)
        if ref.same_length:
            mask_len = klen - M
            shift = qlen - mask_len if mask_len > 0 else qlen
            mask = (torch.triu(ones, 1 + mlen) + torch.tril(ones, -shift)) > 0
        else:
            mask = torch.triu(ones, 1 + mlen) > 0
        pos = torch.arange(klen - 1, -1, -1.0, dtype=dtype)
        if ref.clamp_len > 0:
            pos = pos.clamp(max=ref.clamp_len)
        ang = torch.outer(pos, inv_freq)
        r = torch.cat([ang.sin(), ang.cos()], dim=-1)
        h = embed(tok)
        hids = []
        for n, L in enumerate(layers):
            hids.append(h)
            cat = torch.cat([mems[n], h], 0)
            x = ln(cat, L["ln1_g"], L["ln1_b"]) if ref.pre_lnorm else cat
            q, k, v = torch.chunk(x @ L["qkv"].t(), 3, dim=-1)
            q = q[-qlen:].view(qlen, H, D)
            k = k.view(klen, H, D)
            v = v.view(klen, H, D)
            rk = (r @ L["r"].t()).view(klen, H, D)
            ac = torch.einsum("ihd,jhd->ijh", q + L["u"], k)
            bd = rel_shift(torch.einsum("ihd,jhd->ijh", q + L["v"], rk))
            score = (ac + bd) / math.sqrt(D)
            score = score.masked_fill(mask[:, :, None], -float("inf"))
            prob = torch.softmax(score, dim=1)
            vec = torch.einsum("ijh,jhd->ihd", prob, v).reshape(qlen, H * D)
            a = vec @ L["o"].t()
            h = h + a if ref.pre_lnorm else ln(h + a, L["ln1_g"], L["ln1_b"])
            if ref.pre_lnorm:
                y = ln(h, L["ln2_g"], L["ln2_b"])
                h = h + (torch.relu(y @ L["ff1_w"].t() + L["ff1_b"]) @ L["ff2_w"].t()
                         + L["ff2_b"])
            else:
                y = torch.relu(h @ L["ff1_w"].t() + L["ff1_b"]) @ L["ff2_w"].t() + L["ff2_b"]
                h = ln(h + y, L["ln2_g"], L["ln2_b"])
        new_mems = [torch.cat([m, hh], 0)[-M:] for m, hh in zip(mems, hids)]
        return h, new_mems

    out_w = [_t(w) for w in ref.out_w]
    out_b = [_t(b) for b in ref.out_b]
    out_proj = [_t(p) for p in ref.out_proj]

    def logit(hid, w, b, p):
        return (hid if p is None else hid @ p) @ w.t() + b

    def nll(hid, target):
        if not ref.cutoffs:
            lp = torch.log_softmax(logit(hid, out_w[0], out_b[0], out_proj[0]), -1)
            return -lp.gather(1, target[:, None]).squeeze(1)
        ws, bs = [], []
        for i in range(len(ends) - 1):
            if ref.div_val == 1:
                ws.append(out_w[0][ends[i]:ends[i + 1]])
                bs.append(out_b[0][ends[i]:ends[i + 1]])
            else:
                ws.append(out_w[i])
                bs.append(out_b[i])
        head_w = torch.cat([ws[0], _t(ref.cluster_w)], 0)
        head_b = torch.cat([bs[0], _t(ref.cluster_b)], 0)
        head = torch.log_softmax(logit(hid, head_w, head_b, out_proj[0]), 1)
        res = torch.zeros(len(target), dtype=dtype)
        for i in range(len(ends) - 1):
            sel = ((target >= ends[i]) & (target < ends[i + 1])).nonzero().flatten()
            if sel.numel() == 0:
                continue
            tgt = target[sel] - ends[i]
            if i == 0:
                lp = head[sel].gather(1, tgt[:, None]).squeeze(1)
            else:
                tail = torch.log_softmax(logit(hid[sel], ws[i], bs[i], out_proj[i]), 1)
                lp = head[sel, ends[1] + i - 1] + tail.gather(1, tgt[:, None]).squeeze(1)
            res[sel] = -lp
        return res

    ids_t = torch.as_tensor(ids, dtype=torch.long)
    inputs, targets = ids_t[:-1], ids_t[1:]
    mems = [torch.zeros(0, dm, dtype=dtype) for _ in range(ref.n_layer)]
    outs = []
    for s in range(0, len(inputs), tgt_len):
        h, mems = segment(inputs[s:s + tgt_len], mems)
        outs.append(nll(h, targets[s:s + tgt_len]))
    return torch.cat(outs).double().numpy()


@pytest.fixture(scope="module")
def refs(models):
    return {name: xl_reference.Reference.from_dir(d) for name, d in models.items()}


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_torch_restatement(refs, name):
    ref = refs[name]
    ids = gen.token_stream(name)
    for tgt_len in sorted({ref.cfg["tgt_len"], 1, ref.mem_len + 3}):
        a = ref.eval_nll(ids, tgt_len)
        b = torch_eval_nll(ref, ids, tgt_len)
        assert np.abs(a - b).max() < 1e-9, (name, tgt_len, np.abs(a - b).max())


@pytest.mark.parametrize("name", NAMES)
def test_logprobs_normalised(refs, name):
    ref = refs[name]
    lp = ref.eval_logprobs(gen.token_stream(name)[:30], ref.cfg["tgt_len"])
    assert np.abs(np.exp(lp).sum(axis=1) - 1.0).max() < 1e-12
    assert np.isfinite(lp).all()


@pytest.mark.parametrize("name", [n for n in NAMES if gen.CONFIGS[n]["same_length"]])
def test_same_length_is_segmentation_independent(refs, name):
    ref = refs[name]
    ids = gen.token_stream(name)
    base = ref.eval_nll(ids, 1)
    for tgt_len in (3, ref.cfg["tgt_len"], 2 * ref.mem_len + 3):
        assert np.abs(ref.eval_nll(ids, tgt_len) - base).max() < 1e-10, tgt_len


@pytest.mark.parametrize("name", [n for n in NAMES if not gen.CONFIGS[n]["same_length"]])
def test_without_same_length_segmenting_matters(refs, name):
    ref = refs[name]
    ids = gen.token_stream(name)
    diff = np.abs(ref.eval_nll(ids, ref.cfg["tgt_len"]) - ref.eval_nll(ids, 1)).max()
    assert diff > 1e-2, diff


def _nll_with(model_dir, ids, tgt_len, tensor_edit=None, **overrides):
    ref = xl_reference.Reference.from_dir(model_dir, **overrides)
    if tensor_edit:
        tensors = dict(ref.t)
        tensor_edit(tensors)
        ref = xl_reference.Reference(ref.cfg, tensors, mem_len=ref.mem_len,
                                     clamp_len=ref.clamp_len, same_length=ref.same_length)
    return ref.eval_nll(ids, tgt_len)


@pytest.mark.parametrize("name", NAMES)
def test_every_tensor_matters(models, refs, name):
    """Adding +-20% of its RMS (random signs) to any stored tensor moves some NLL by > 100x the
    tolerance, so the engine cannot ignore or misplace a tensor and still pass."""
    ref = refs[name]
    ids = gen.token_stream(name)[:2 * ref.mem_len + 10]
    tgt = ref.cfg["tgt_len"]
    base = ref.eval_nll(ids, tgt)
    tied_copies = {s[0] for s in gen.tensor_specs(ref.cfg) if s[2].endswith("_tied")}
    rng = np.random.default_rng(7)
    weak = []
    for tname in sorted(ref.t):
        if tname in tied_copies:
            continue  # a stored copy of a tied tensor; its embedding side is perturbed instead

        def edit(ts, tname=tname):
            a = ts[tname]
            rms = np.sqrt((a ** 2).mean())
            ts[tname] = a + 0.2 * rms * rng.choice([-1.0, 1.0], a.shape)
            for s in gen.tensor_specs(ref.cfg):  # keep stored tied copies equal
                if s[2].endswith("_tied") and s[3] == tname and s[0] in ts:
                    ts[s[0]] = ts[tname]
        diff = np.abs(_nll_with(models[name], ids, tgt, edit) - base).max()
        if diff < 1e-2:
            weak.append((tname, diff))
    assert not weak, weak


def test_options_matter(models):
    """Each semantic choice the engine must get right changes the NLL by far more than 1e-4."""
    def d(a, b):
        return np.abs(a - b).max()

    # clamp_len (same_length model and plain model), same_length, mem_len, epsilon.
    name = "words_div1_proj_mixed"
    ids = gen.token_stream(name)
    base = _nll_with(models[name], ids, 8)
    assert d(base, _nll_with(models[name], ids, 8, clamp_len=0)) > 1e-2
    assert d(base, _nll_with(models[name], ids, 8, same_length=False)) > 1e-2
    assert d(base, _nll_with(models[name], ids, 8, mem_len=12)) > 1e-2
    name = "byte_plain_proj_preln"
    ids = gen.token_stream(name)
    ref = xl_reference.Reference.from_dir(models[name])
    base = ref.eval_nll(ids, 6)
    cfg = dict(ref.cfg, layer_norm_epsilon=1e-5)
    assert d(base, xl_reference.Reference(cfg, ref.t).eval_nll(ids, 6)) > 1e-2
    name = "words_div3_dembed_untied"
    ids = gen.token_stream(name)
    assert d(_nll_with(models[name], ids, 6),
             _nll_with(models[name], ids, 6, clamp_len=0)) > 1e-2

    # Cluster order: the authors' reversed reading of the cluster rows.
    name = "words_div2_3tails_preln"
    ids = gen.token_stream(name)
    base = _nll_with(models[name], ids, 7)

    def reverse_clusters(ts):
        ts["crit.cluster_weight"] = ts["crit.cluster_weight"][::-1].copy()
        ts["crit.cluster_bias"] = ts["crit.cluster_bias"][::-1].copy()
    assert d(base, _nll_with(models[name], ids, 7, reverse_clusters)) > 1e-1

    # Memory starting with mem_len zero vectors (HF's default) instead of empty.
    ref = xl_reference.Reference.from_dir(models[name])
    zero = [np.zeros((ref.mem_len, ref.d_model)) for _ in range(ref.n_layer)]
    lp, _ = ref.forward(ids[:7], zero)
    alt = -lp[np.arange(7), ids[1:8]]
    assert d(base[:7], alt) > 1e-1


def test_generator_is_deterministic_and_covers_options():
    a = gen.random_tensors(gen.public_config(gen.CONFIGS["words_div2_3tails_preln"]), SEED)
    b = gen.random_tensors(gen.public_config(gen.CONFIGS["words_div2_3tails_preln"]), SEED)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    cfgs = list(gen.CONFIGS.values())
    assert any(not c["cutoffs"] for c in cfgs)
    assert any(c["cutoffs"] and c["div_val"] == 1 for c in cfgs)
    assert any(c["cutoffs"] and c["div_val"] > 1 for c in cfgs)
    assert any(c["d_embed"] != c["d_model"] for c in cfgs)
    assert any(len(set(c["tie_projs"])) == 2 for c in cfgs)
    assert any(c["pre_lnorm"] for c in cfgs) and any(not c["pre_lnorm"] for c in cfgs)
    assert any(c["same_length"] and c["clamp_len"] > 0 for c in cfgs)
    assert any(not c["same_length"] for c in cfgs)
    assert any(c["untie_r"] for c in cfgs) and any(not c["untie_r"] for c in cfgs)
    assert any(c["_tied_storage"] == "once" and c["tie_word_embeddings"] for c in cfgs)
    assert any(c["_tied_storage"] == "twice" and c["tie_word_embeddings"] for c in cfgs)
    assert {c["_dtype"] for c in cfgs} == {"F32", "F16", "BF16"}
