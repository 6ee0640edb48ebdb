"""xl_reference.py: the independent float64 numpy reference of Transformer-XL (attn_type 0).

Owns: loading an xlserve model directory (HF TransfoXL layout) into float64 arrays, the forward
pass written from the paper's equations (Dai et al. 2019, sec. 3.3 and appendix B) in the most
direct way, and the reference evaluation loop (segments of tgt_len with memory).

Deliberately naive: for every (query, key) pair the relative distance i - j is formed
explicitly and its sinusoid R_{i-j} is built and projected by W_r; there is no relative-shift
trick. Semantics (checked against the authors' MemTransformerLM and HF TransfoXL):
  - memory of layer n = the INPUT hidden states of layer n; new_mem = cat(mem, h)[-mem_len:];
    memory starts EMPTY (the authors' evaluation), never mem_len zero vectors (HF default);
  - key j is visible from the query at key index p iff j <= p, and, with same_length, also
    j > p - mem_len (each query sees exactly the last mem_len positions, itself included);
  - distances are clamped at clamp_len when clamp_len > 0;
  - score = ((q + u).k + (q + v).(W_r R_d)) / sqrt(d_head), u = r_w_bias, v = r_r_bias;
  - adaptive log-softmax uses the Hugging Face cluster order: tail cluster i (1-based) takes
    head column cutoffs[0] + i - 1.
"""
import json
import math
import os
import sys

import numpy as np

try:
    from xlmodel import safetensors_io
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "tools"))
    from xlmodel import safetensors_io


def layer_norm(x, gain, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch
    return (x - mean) / np.sqrt(var + eps) * gain + bias


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def sinusoid(distance, d_model):
    """R_d = [sin(d * inv_freq), cos(d * inv_freq)], inv_freq = 1 / 10000^(2k / d_model)."""
    inv_freq = 1.0 / (10000.0 ** (np.arange(0.0, d_model, 2.0) / d_model))
    angles = float(distance) * inv_freq
    return np.concatenate([np.sin(angles), np.cos(angles)])


class Reference:
    """A loaded model plus the run-time settings (mem_len, clamp_len, same_length)."""

    def __init__(self, config, tensors, mem_len=None, clamp_len=None, same_length=None):
        self.cfg = dict(config)
        self.t = {k: np.asarray(v, dtype=np.float64) for k, v in tensors.items()}
        c = self.cfg
        self.vocab = int(c["vocab_size"])
        self.cutoffs = list(c.get("cutoffs") or [])
        self.d_model = int(c["d_model"])
        self.d_embed = int(c.get("d_embed", self.d_model))
        self.n_head = int(c["n_head"])
        self.d_head = int(c["d_head"])
        self.n_layer = int(c["n_layer"])
        self.div_val = int(c.get("div_val", 1))
        self.pre_lnorm = bool(c.get("pre_lnorm", False))
        self.untie_r = bool(c.get("untie_r", True))
        self.eps = float(c.get("layer_norm_epsilon", 1e-5))
        self.tie_word = bool(c.get("tie_word_embeddings", True))
        self.tie_projs = list(c.get("tie_projs") or [])
        self.mem_len = int(c["mem_len"] if mem_len is None else mem_len)
        self.clamp_len = int(c.get("clamp_len", -1) if clamp_len is None else clamp_len)
        self.same_length = bool(c.get("same_length", False) if same_length is None
                                else same_length)
        if int(c.get("attn_type", 0)) != 0:
            raise ValueError("reference implements attn_type 0 only")
        self.ends = [0] + self.cutoffs + [self.vocab]
        self.attention_log = None  # a list to collect (layer, query, probs [keys, heads])
        self._resolve_weights()

    @classmethod
    def from_dir(cls, model_dir, **overrides):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        tensors, _ = safetensors_io.read(os.path.join(model_dir, "model.safetensors"))
        return cls(cfg, tensors, **overrides)

    # -- weights -------------------------------------------------------------------------

    def _need(self, name):
        if name not in self.t:
            raise KeyError(f"tensor {name} missing")
        return self.t[name]

    def _tied(self, crit_name, emb_name):
        """A tied tensor: the embedding side; a stored crit copy must be equal."""
        ref = self._need(emb_name)
        if crit_name in self.t and not np.array_equal(self.t[crit_name], ref):
            raise ValueError(f"{crit_name} is tied to {emb_name} but differs")
        return ref

    def _resolve_weights(self):
        n_clusters = len(self.cutoffs)
        # Adaptive input: emb_layers[i] (rows of cluster i) and emb_projs[i] ([d_model, d_emb_i]).
        self.emb = []
        self.emb_proj = []
        if self.div_val == 1:
            self.emb.append(self._need("transformer.word_emb.emb_layers.0.weight"))
            self.emb_proj.append(self._need("transformer.word_emb.emb_projs.0")
                                 if self.d_embed != self.d_model else None)
        else:
            for i in range(n_clusters + 1):
                self.emb.append(self._need(f"transformer.word_emb.emb_layers.{i}.weight"))
                self.emb_proj.append(self._need(f"transformer.word_emb.emb_projs.{i}"))
        # Output layers: one full-vocab layer when div_val == 1, else one per cluster.
        self.out_w, self.out_b = [], []
        for i in range(1 if self.div_val == 1 else n_clusters + 1):
            wname = f"crit.out_layers.{i}.weight"
            if self.tie_word:
                w = self._tied(wname, f"transformer.word_emb.emb_layers.{i}.weight")
            else:
                w = self._need(wname)
            self.out_w.append(w)
            self.out_b.append(self._need(f"crit.out_layers.{i}.bias"))
        # Output projections per softmax cluster ([d_model, d_emb_i]; None = identity).
        self.out_proj = []
        for i in range(n_clusters + 1):
            tie = bool(self.tie_projs[i]) if i < len(self.tie_projs) else False
            pname = f"crit.out_projs.{i}"
            if self.div_val == 1:
                if self.d_embed == self.d_model:
                    self.out_proj.append(None)
                elif tie:
                    self.out_proj.append(self._tied(pname, "transformer.word_emb.emb_projs.0"))
                else:
                    self.out_proj.append(self._need(pname))
            else:
                if tie:
                    self.out_proj.append(self._tied(pname, f"transformer.word_emb.emb_projs.{i}"))
                else:
                    self.out_proj.append(self._need(pname))
        if n_clusters:
            self.cluster_w = self._need("crit.cluster_weight")
            self.cluster_b = self._need("crit.cluster_bias")
        # Layers.
        self.layers = []
        for n in range(self.n_layer):
            p = f"transformer.layers.{n}."
            if self.untie_r:
                u = self._need(p + "dec_attn.r_w_bias")
                v = self._need(p + "dec_attn.r_r_bias")
            else:
                u = self._need("transformer.r_w_bias")
                v = self._need("transformer.r_r_bias")
            self.layers.append(dict(
                qkv=self._need(p + "dec_attn.qkv_net.weight"),
                o=self._need(p + "dec_attn.o_net.weight"),
                r=self._need(p + "dec_attn.r_net.weight"),
                u=u.reshape(self.n_head, self.d_head),
                v=v.reshape(self.n_head, self.d_head),
                ln1_g=self._need(p + "dec_attn.layer_norm.weight"),
                ln1_b=self._need(p + "dec_attn.layer_norm.bias"),
                ff1_w=self._need(p + "pos_ff.CoreNet.0.weight"),
                ff1_b=self._need(p + "pos_ff.CoreNet.0.bias"),
                ff2_w=self._need(p + "pos_ff.CoreNet.3.weight"),
                ff2_b=self._need(p + "pos_ff.CoreNet.3.bias"),
                ln2_g=self._need(p + "pos_ff.layer_norm.weight"),
                ln2_b=self._need(p + "pos_ff.layer_norm.bias"),
            ))

    # -- pieces of the forward pass ------------------------------------------------------

    def cluster_of(self, token):
        for i in range(len(self.ends) - 1):
            if self.ends[i] <= token < self.ends[i + 1]:
                return i
        raise ValueError(f"token {token} outside the vocabulary")

    def embed(self, tokens):
        out = np.zeros((len(tokens), self.d_model))
        for row, tok in enumerate(tokens):
            if self.div_val == 1:
                e = self.emb[0][tok]
                proj = self.emb_proj[0]
            else:
                c = self.cluster_of(tok)
                e = self.emb[c][tok - self.ends[c]]
                proj = self.emb_proj[c]
            out[row] = e if proj is None else proj @ e
        return out * math.sqrt(self.d_model)

    def visible(self, p, j):
        """May the query at key index p attend to key index j (same segment indexing)?"""
        if j > p:
            return False
        if self.same_length and j <= p - self.mem_len:
            return False
        return True

    def attention_layer(self, L, h, mem):
        """h: [qlen, d_model] input of this layer; mem: [mlen, d_model] memory of this layer."""
        H, D = self.n_head, self.d_head
        qlen, mlen = h.shape[0], mem.shape[0]
        cat = np.concatenate([mem, h], axis=0)
        x = layer_norm(cat, L["ln1_g"], L["ln1_b"], self.eps) if self.pre_lnorm else cat
        heads = x @ L["qkv"].T
        q = heads[mlen:, :H * D].reshape(qlen, H, D)
        k = heads[:, H * D:2 * H * D].reshape(-1, H, D)
        val = heads[:, 2 * H * D:].reshape(-1, H, D)
        attn_vec = np.zeros((qlen, H, D))
        for i in range(qlen):
            p = mlen + i  # the query's own key index
            keys = [j for j in range(cat.shape[0]) if self.visible(p, j)]
            scores = np.zeros((len(keys), H))
            for col, j in enumerate(keys):
                dist = p - j
                if self.clamp_len > 0:
                    dist = min(dist, self.clamp_len)
                r_k = (L["r"] @ sinusoid(dist, self.d_model)).reshape(H, D)  # W_r R_{i-j}
                content = ((q[i] + L["u"]) * k[j]).sum(axis=-1)            # (a) + (c)
                position = ((q[i] + L["v"]) * r_k).sum(axis=-1)            # (b) + (d)
                scores[col] = (content + position) / math.sqrt(D)
            probs = np.exp(scores - scores.max(axis=0))
            probs /= probs.sum(axis=0)
            if self.attention_log is not None:
                self.attention_log.append(probs)
            attn_vec[i] = np.einsum("jh,jhd->hd", probs, val[keys])
        attn_out = attn_vec.reshape(qlen, H * D) @ L["o"].T
        if self.pre_lnorm:
            return h + attn_out
        return layer_norm(h + attn_out, L["ln1_g"], L["ln1_b"], self.eps)

    def ff_layer(self, L, h):
        def core(x):
            return np.maximum(x @ L["ff1_w"].T + L["ff1_b"], 0.0) @ L["ff2_w"].T + L["ff2_b"]
        if self.pre_lnorm:
            return h + core(layer_norm(h, L["ln2_g"], L["ln2_b"], self.eps))
        return layer_norm(h + core(h), L["ln2_g"], L["ln2_b"], self.eps)

    def _project(self, h, i):
        return h if self.out_proj[i] is None else h @ self.out_proj[i]

    def log_probs(self, h):
        """h: [n, d_model] final hidden states -> [n, vocab] natural-log probabilities."""
        if not self.cutoffs:
            return log_softmax(self._project(h, 0) @ self.out_w[0].T + self.out_b[0])
        weights, biases = [], []
        for i in range(len(self.ends) - 1):
            if self.div_val == 1:
                lo, hi = self.ends[i], self.ends[i + 1]
                weights.append(self.out_w[0][lo:hi])
                biases.append(self.out_b[0][lo:hi])
            else:
                weights.append(self.out_w[i])
                biases.append(self.out_b[i])
        head_w = np.concatenate([weights[0], self.cluster_w], axis=0)
        head_b = np.concatenate([biases[0], self.cluster_b], axis=0)
        head = log_softmax(self._project(h, 0) @ head_w.T + head_b)
        out = np.zeros((h.shape[0], self.vocab))
        shortlist = self.cutoffs[0]
        out[:, :shortlist] = head[:, :shortlist]
        for i in range(1, len(self.ends) - 1):
            tail = log_softmax(self._project(h, i) @ weights[i].T + biases[i])
            out[:, self.ends[i]:self.ends[i + 1]] = head[:, shortlist + i - 1, None] + tail
        return out

    # -- forward and evaluation ------------------------------------------------------------

    def empty_mems(self):
        return [np.zeros((0, self.d_model)) for _ in range(self.n_layer)]

    def forward(self, tokens, mems):
        """One segment: returns (log-probs [len(tokens), vocab], new mems)."""
        h = self.embed(tokens)
        new_mems = []
        for n, L in enumerate(self.layers):
            cat = np.concatenate([mems[n], h], axis=0)
            new_mems.append(cat[max(0, cat.shape[0] - self.mem_len):] if self.mem_len > 0
                            else cat[:0])
            h = self.ff_layer(L, self.attention_layer(L, h, mems[n]))
        return self.log_probs(h), new_mems

    def eval_logprobs(self, ids, tgt_len):
        """Reference evaluation loop: inputs ids[:-1], cut into consecutive segments of tgt_len
        (the last may be shorter), memory carried across. Returns [len(ids)-1, vocab]."""
        ids = [int(x) for x in ids]
        inputs = ids[:-1]
        mems = self.empty_mems()
        out = []
        for s in range(0, len(inputs), tgt_len):
            lp, mems = self.forward(inputs[s:s + tgt_len], mems)
            out.append(lp)
        return np.concatenate(out, axis=0)

    def eval_nll(self, ids, tgt_len):
        """nll[i] = -log p(ids[i+1] | ids[0..i]), natural log."""
        lp = self.eval_logprobs(ids, tgt_len)
        targets = np.asarray([int(x) for x in ids[1:]])
        return -lp[np.arange(len(targets)), targets]
