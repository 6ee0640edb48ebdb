"""The TensorFlow variables the authors' Transformer-XL code (kimiyoung/transformer-xl, tf/)
creates for a configuration: names and shapes, in creation order. Written for the tests of the
TF checkpoint converter, from the authors' code and independently of the converter's own name
mapping, so the two can be compared.

Where each name comes from (kimiyoung/transformer-xl, tf/model.py unless said otherwise):

* `transformer(...)` opens `tf.variable_scope('transformer')` (scope='transformer') and first
  creates `r_w_bias` and `r_r_bias`: shape [n_layer, n_head, d_head] when untie_r, else
  [n_head, d_head] (its `if untie_r:` branch, tf.get_variable('r_w_bias'/'r_r_bias', ...)).
* Input embedding: train_gpu.py passes use_tpu=False, so `mask_adaptive_embedding_lookup`
  (scope 'adaptive_embed'); `mul_adaptive_embedding_lookup` (TPU) creates the same names:
  - div_val == 1: `adaptive_embed/lookup_table` [n_token, d_embed], and `adaptive_embed/proj_W`
    [d_embed, d_model] only when d_model != d_embed (`if d_proj != d_embed:`). The cutoffs do not
    split this table (the softmax slices it).
  - div_val > 1: for each bin i of cutoff_ends = [0] + cutoffs + [n_token], in
    `tf.variable_scope('cutoff_{i}')`: `lookup_table` [r_idx - l_idx, d_embed // div_val**i] and
    `proj_W` [d_embed // div_val**i, d_model], the latter left out when
    `d_proj == cur_d_embed and not proj_same_dim`.
* Per layer i, `tf.variable_scope('layer_{i}')`:
  - `rel_multihead_attn` (scope 'rel_attn'): `tf.layers.dense(..., use_bias=False,
    name='qkv')` -> `rel_attn/qkv/kernel` [d_model, 3 * n_head * d_head]; name='r' on the
    positional embedding (width d_model) -> `rel_attn/r/kernel` [d_model, n_head * d_head];
    name='o' -> `rel_attn/o/kernel` [n_head * d_head, d_model]; then
    `tf.contrib.layers.layer_norm(attn_out + w, begin_norm_axis=-1)`, whose default scope is
    'LayerNorm' with variables `beta` and `gamma` of the last axis: `rel_attn/LayerNorm/beta`,
    `rel_attn/LayerNorm/gamma` [d_model].
  - `positionwise_FF` (scope 'ff'): `tf.layers.dense(..., d_inner, name='layer_1')` ->
    `ff/layer_1/kernel` [d_model, d_inner], `ff/layer_1/bias` [d_inner];
    `tf.layers.dense(..., d_model, name='layer_2')` -> `ff/layer_2/kernel` [d_inner, d_model],
    `ff/layer_2/bias` [d_model]; layer norm -> `ff/LayerNorm/beta`, `ff/LayerNorm/gamma` [d_model].
* Output: `mask_adaptive_logsoftmax` (scope 'adaptive_softmax'); the output embedding is always
  the input embedding's tables (params_W = the lookup tables; train_gpu.py's tie_weight flag is
  never read), so the softmax creates only:
  - no cutoffs: `adaptive_softmax/bias` [n_token] (and no projection variable: it reuses the
    embedding's proj_W, which may be None).
  - cutoffs: per bin i, scope 'cutoff_{i}': `b` [r_idx - l_idx]; `proj` [d_embed // div_val**i,
    d_model] only when the bin's projection is not tied (tie_projs[i] False) and not
    `(div_val == 1 or not proj_same_dim) and d_proj == cur_d_embed`; bin 0 also has
    `cluster_W` [len(cutoffs), d_embed] and `cluster_b` [len(cutoffs)].
  - tie_projs (tf/train_gpu.py, get_model_fn): all False, except bins 1.. when
    --proj_share_all_but_first (then bin i uses the embedding's cutoff_{i}/proj_W).
* The cutoffs the model receives are corpus-info.json's "cutoffs" without the first and last
  entry (train_gpu.py main: `corpus_info["cutoffs"][1:-1]`); tf/data_utils.py sets them to
  [0, 20000, 40000, 200000, V] for wt103, [0, 60000, 100000, 640000, V] for lm1b and [] for
  enwik8/text8 (so those have no cutoffs).
* training_state=True adds what a checkpoint written by train_gpu.py's `tf.train.Saver()` during
  training also holds: `global_step` (int64 scalar, tf.train.get_or_create_global_step) and,
  from `tf.train.AdamOptimizer`, `beta1_power`, `beta2_power` (float32 scalars) and two slots per
  trainable variable, `<name>/Adam` and `<name>/Adam_1` (TF1's optimizer naming, not the
  authors' code). Whether the released checkpoints still hold them is unknown here.

`SOTA_FLAGS` records the model flags of the authors' tf/sota/{enwik8,text8,wt103,lm1b}.sh
(train_gpu.py's defaults where a script passes none: div_val 1, untie_r False, proj_same_dim
True, proj_share_all_but_first False); n_token comes from each model's corpus-info.json."""
import numpy as np

SOTA_FLAGS = {
    # tf/sota/enwik8.sh, text8.sh: no div_val/untie_r/proj flags -> train_gpu.py defaults
    "enwik8": dict(n_layer=24, d_model=1024, d_embed=1024, n_head=8, d_head=128, d_inner=3072,
                   div_val=1, untie_r=False, proj_share_all_but_first=False, proj_same_dim=True,
                   cutoffs=[], tgt_len=128, mem_len=3800, clamp_len=1000, same_length=True),
    "text8": dict(n_layer=24, d_model=1024, d_embed=1024, n_head=8, d_head=128, d_inner=3072,
                  div_val=1, untie_r=False, proj_share_all_but_first=False, proj_same_dim=True,
                  cutoffs=[], tgt_len=128, mem_len=3800, clamp_len=1000, same_length=True),
    # tf/sota/wt103.sh
    "wt103": dict(n_layer=18, d_model=1024, d_embed=1024, n_head=16, d_head=64, d_inner=4096,
                  div_val=4, untie_r=True, proj_share_all_but_first=True, proj_same_dim=True,
                  cutoffs=[20000, 40000, 200000], tgt_len=128, mem_len=1600, clamp_len=1000,
                  same_length=True),
    # tf/sota/lm1b.sh
    "lm1b": dict(n_layer=24, d_model=1280, d_embed=1280, n_head=16, d_head=80, d_inner=8192,
                 div_val=4, untie_r=True, proj_share_all_but_first=False, proj_same_dim=False,
                 cutoffs=[60000, 100000, 640000], tgt_len=32, mem_len=128, clamp_len=-1,
                 same_length=True),
}


def _get(config, key, default=None):
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def tie_projs_of(config):
    """train_gpu.py's tie_projs: one bool per bin (len(cutoffs) + 1)."""
    explicit = _get(config, "tie_projs")
    n_bins = len(_get(config, "cutoffs", []) or []) + 1
    if explicit is not None:
        if len(explicit) != n_bins:
            raise ValueError(f"tie_projs has {len(explicit)} entries for {n_bins} bins")
        return [bool(t) for t in explicit]
    share = bool(_get(config, "proj_share_all_but_first", False))
    return [False] + [share] * (n_bins - 1)


def authors_tf_names(config, training_state=False):
    """[(name, shape tuple)] of the variables tf/model.py's transformer() creates for CONFIG
    (a dict or an object with n_token, n_layer, d_model, d_embed, n_head, d_head, d_inner and
    optionally cutoffs [], div_val 1, untie_r False, proj_same_dim True,
    proj_share_all_but_first False or an explicit tie_projs list), in creation order."""
    n_token = int(_get(config, "n_token"))
    n_layer = int(_get(config, "n_layer"))
    d_model = int(_get(config, "d_model"))
    d_embed = int(_get(config, "d_embed", d_model))
    n_head = int(_get(config, "n_head"))
    d_head = int(_get(config, "d_head"))
    d_inner = int(_get(config, "d_inner"))
    cutoffs = [int(c) for c in (_get(config, "cutoffs", []) or [])]
    div_val = int(_get(config, "div_val", 1))
    untie_r = bool(_get(config, "untie_r", False))
    proj_same_dim = bool(_get(config, "proj_same_dim", True))
    tie_projs = tie_projs_of(config)
    ends = [0] + cutoffs + [n_token]

    out = []

    def var(name, *shape):
        out.append(("transformer/" + name, tuple(int(s) for s in shape)))

    bias_shape = (n_layer, n_head, d_head) if untie_r else (n_head, d_head)
    var("r_w_bias", *bias_shape)
    var("r_r_bias", *bias_shape)

    if div_val == 1:
        var("adaptive_embed/lookup_table", n_token, d_embed)
        if d_model != d_embed:
            var("adaptive_embed/proj_W", d_embed, d_model)
    else:
        for i in range(len(ends) - 1):
            cur = d_embed // div_val ** i
            var(f"adaptive_embed/cutoff_{i}/lookup_table", ends[i + 1] - ends[i], cur)
            if not (d_model == cur and not proj_same_dim):
                var(f"adaptive_embed/cutoff_{i}/proj_W", cur, d_model)

    for layer in range(n_layer):
        p = f"layer_{layer}/"
        var(p + "rel_attn/qkv/kernel", d_model, 3 * n_head * d_head)
        var(p + "rel_attn/r/kernel", d_model, n_head * d_head)
        var(p + "rel_attn/o/kernel", n_head * d_head, d_model)
        var(p + "rel_attn/LayerNorm/beta", d_model)
        var(p + "rel_attn/LayerNorm/gamma", d_model)
        var(p + "ff/layer_1/kernel", d_model, d_inner)
        var(p + "ff/layer_1/bias", d_inner)
        var(p + "ff/layer_2/kernel", d_inner, d_model)
        var(p + "ff/layer_2/bias", d_model)
        var(p + "ff/LayerNorm/beta", d_model)
        var(p + "ff/LayerNorm/gamma", d_model)

    if not cutoffs:
        var("adaptive_softmax/bias", n_token)
    else:
        for i in range(len(ends) - 1):
            cur = d_embed // div_val ** i
            var(f"adaptive_softmax/cutoff_{i}/b", ends[i + 1] - ends[i])
            if not tie_projs[i] and not ((div_val == 1 or not proj_same_dim) and d_model == cur):
                var(f"adaptive_softmax/cutoff_{i}/proj", cur, d_model)
            if i == 0:
                var("adaptive_softmax/cutoff_0/cluster_W", len(cutoffs), d_embed)
                var("adaptive_softmax/cutoff_0/cluster_b", len(cutoffs))

    if training_state:
        model = list(out)
        out.append(("global_step", ()))
        out.append(("beta1_power", ()))
        out.append(("beta2_power", ()))
        for name, shape in model:
            out.append((name + "/Adam", shape))
            out.append((name + "/Adam_1", shape))
    return out


def authors_tf_random_weights(config, seed=0, training_state=False):
    """{name: array} for every variable of authors_tf_names(CONFIG): float32 N(0, 0.3^2), layer
    norm gains around 1 (1 + N(0, 0.2^2)); global_step an int64 scalar."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in authors_tf_names(config, training_state):
        if name == "global_step":
            out[name] = np.array(1000, dtype=np.int64)
        elif name.endswith("LayerNorm/gamma"):
            out[name] = (1.0 + 0.2 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    return out
