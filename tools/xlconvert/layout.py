"""The HF TransfoXLLMHeadModel tensor layout as a function of the config, in numpy terms: which
names must exist with which shapes, and which are tied. Used to validate a conversion before
anything is written (no torch needed)."""


def cluster_bounds(vocab_size, cutoffs):
    ends = [0] + list(cutoffs) + [vocab_size]
    return [(ends[i], ends[i + 1]) for i in range(len(ends) - 1)]


def expected_shapes(cfg):
    """{name: shape} of every tensor of the model (tied duplicates included)."""
    V, D, E = cfg["vocab_size"], cfg["d_model"], cfg["d_embed"]
    H, Dh, Di, L = cfg["n_head"], cfg["d_head"], cfg["d_inner"], cfg["n_layer"]
    cut, div = list(cfg["cutoffs"]), cfg["div_val"]
    out = {}
    bounds = cluster_bounds(V, cut)
    if div == 1:
        out["transformer.word_emb.emb_layers.0.weight"] = (V, E)
        if D != E:
            out["transformer.word_emb.emb_projs.0"] = (D, E)
    else:
        for i, (lo, hi) in enumerate(bounds):
            out[f"transformer.word_emb.emb_layers.{i}.weight"] = (hi - lo, E // div ** i)
            out[f"transformer.word_emb.emb_projs.{i}"] = (D, E // div ** i)
    if not cfg["untie_r"]:
        out["transformer.r_w_bias"] = (H, Dh)
        out["transformer.r_r_bias"] = (H, Dh)
    for n in range(L):
        p = f"transformer.layers.{n}."
        if cfg["untie_r"]:
            out[p + "dec_attn.r_w_bias"] = (H, Dh)
            out[p + "dec_attn.r_r_bias"] = (H, Dh)
        out[p + "dec_attn.qkv_net.weight"] = (3 * H * Dh, D)
        out[p + "dec_attn.r_net.weight"] = (H * Dh, D)
        out[p + "dec_attn.o_net.weight"] = (D, H * Dh)
        out[p + "dec_attn.layer_norm.weight"] = (D,)
        out[p + "dec_attn.layer_norm.bias"] = (D,)
        out[p + "pos_ff.CoreNet.0.weight"] = (Di, D)
        out[p + "pos_ff.CoreNet.0.bias"] = (Di,)
        out[p + "pos_ff.CoreNet.3.weight"] = (D, Di)
        out[p + "pos_ff.CoreNet.3.bias"] = (D,)
        out[p + "pos_ff.layer_norm.weight"] = (D,)
        out[p + "pos_ff.layer_norm.bias"] = (D,)
    if cut:
        out["crit.cluster_weight"] = (len(cut), E)
        out["crit.cluster_bias"] = (len(cut),)
    if div == 1:
        out["crit.out_layers.0.weight"] = (V, E)
        out["crit.out_layers.0.bias"] = (V,)
        if D != E:
            for i in range(len(bounds)):
                out[f"crit.out_projs.{i}"] = (D, E)
    else:
        for i, (lo, hi) in enumerate(bounds):
            out[f"crit.out_layers.{i}.weight"] = (hi - lo, E // div ** i)
            out[f"crit.out_layers.{i}.bias"] = (hi - lo,)
            out[f"crit.out_projs.{i}"] = (D, E // div ** i)
    return out


def tied_sources(cfg):
    """{crit name: word_emb name} for the tensors the config ties."""
    cut, div = list(cfg["cutoffs"]), cfg["div_val"]
    n = len(cut) + 1
    out = {}
    if cfg.get("tie_word_embeddings", True):
        for i in range(n if div != 1 else 1):
            out[f"crit.out_layers.{i}.weight"] = f"transformer.word_emb.emb_layers.{i}.weight"
    tie_projs = cfg.get("tie_projs") or [False] + [True] * len(cut)
    for i, t in enumerate(tie_projs[:n]):
        if not t:
            continue
        if div == 1 and cfg["d_model"] != cfg["d_embed"]:
            out[f"crit.out_projs.{i}"] = "transformer.word_emb.emb_projs.0"
        elif div != 1:
            out[f"crit.out_projs.{i}"] = f"transformer.word_emb.emb_projs.{i}"
    return out


def validate(cfg, tensors, where):
    """Raises ValueError naming every missing, unknown or mis-shaped tensor."""
    want = expected_shapes(cfg)
    problems = []
    for name, shape in want.items():
        if name not in tensors:
            problems.append(f"missing tensor {name} {shape}")
        elif tuple(tensors[name].shape) != tuple(shape):
            problems.append(f"tensor {name}: shape {tuple(tensors[name].shape)}, "
                            f"config implies {shape}")
    for name in tensors:
        if name not in want:
            problems.append(f"unexpected tensor {name} {tuple(tensors[name].shape)}")
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))
