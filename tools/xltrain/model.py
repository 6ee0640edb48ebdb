"""The Transformer-XL language model in PyTorch, written for xlserve with the reference semantics
(kimiyoung/transformer-xl MemTransformerLM / Hugging Face TransfoXLLMHeadModel, attn_type 0):

  - relative multi-head attention with u/v biases (r_w_bias, r_r_bias; per layer or shared),
    sinusoidal R over distances klen-1..0 clamped at clamp_len, the relative shift;
  - memory = each layer's input hidden states, new_mem = cat(mem, h)[-mem_len:], starting EMPTY;
  - causal mask, or with same_length each query attends to exactly mem_len positions (itself
    included) once that much history exists;
  - post-LN (default) or pre-LN residual blocks, ReLU feed-forward;
  - adaptive input embedding (cutoffs, div_val, projections, sqrt(d_model) scale) and projected
    adaptive log-softmax in HF's cluster order (plain softmax when cutoffs is empty).

Parameter names are exactly TransfoXLLMHeadModel's (transformer.layers.N.dec_attn.qkv_net.weight,
crit.out_layers.i.weight, ...), so state_dict() is the export. Tensors are batch-first (B, T, D).
Everything is vectorised: one fused QKV projection, bool masks, no Python loop over positions.

The module is self-contained so benchmarks can import it: `forward(ids, mems)` with a (B, 1) input
is the reference's incremental decode (it re-projects the whole memory every step).
"""
import math
from dataclasses import asdict, dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class XLConfig:
    vocab_size: int = 256
    cutoffs: List[int] = field(default_factory=list)
    d_model: int = 256
    d_embed: int = 256
    n_head: int = 8
    d_head: int = 32
    d_inner: int = 1024
    div_val: int = 1
    pre_lnorm: bool = False
    n_layer: int = 6
    tgt_len: int = 128
    mem_len: int = 256
    clamp_len: int = -1
    same_length: bool = True
    untie_r: bool = True
    tie_word_embeddings: bool = True
    tie_projs: Optional[List[bool]] = None  # default: [False] + [True] * len(cutoffs)
    layer_norm_epsilon: float = 1e-5
    dropout: float = 0.1
    dropatt: float = 0.0

    def __post_init__(self):
        self.cutoffs = list(self.cutoffs)
        if self.tie_projs is None:
            self.tie_projs = [False] + [True] * len(self.cutoffs)
        self.tie_projs = [bool(t) for t in self.tie_projs]

    def to_dict(self):
        return asdict(self)


def sinusoid(pos_seq, d_model):
    """[len] float positions -> [len, d_model]: cat(sin(p * f), cos(p * f)), f = 10000^(-2i/d)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, d_model, 2.0, device=pos_seq.device) / d_model))
    ang = pos_seq[:, None] * inv_freq[None, :]
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


def rel_shift(x):
    """x[..., i, m] scores query i against relative position index m (m = klen-1-distance).
    Returns y[..., i, j] = x[..., i, j + qlen - 1 - i] (key j), garbage where j > i + mlen
    (those are masked). One zero-pad copy, then a strided view: no gather, no loop.

    Within one [qlen, klen+1] padded block, the block read as [klen+1, qlen] minus its first row
    and read again as [qlen, klen] puts element (i, j) at flat offset qlen + i*klen + j."""
    *lead, q, k = x.shape
    padded = F.pad(x, (1, 0)).reshape(-1, q * (k + 1))    # [N, q*(k+1)], contiguous
    n = padded.size(0)
    y = padded.as_strided((n, q, k), (q * (k + 1), k, 1), padded.storage_offset() + q)
    return y.reshape(*lead, q, k)


def attention_mask(qlen, mlen, mem_len, same_length, device):
    """Bool [qlen, klen], True = masked. Causal: key j > mlen + i is masked. same_length also
    masks keys more than (mem_len - 1) positions back, as the reference does."""
    klen = qlen + mlen
    i = torch.arange(qlen, device=device)[:, None]
    j = torch.arange(klen, device=device)[None, :]
    mask = j > i + mlen
    if same_length:
        mask_len = klen - mem_len
        shift = qlen - mask_len if mask_len > 0 else qlen
        mask = mask | (j <= i - shift)
    return mask


class RelAttention(nn.Module):
    """dec_attn: fused qkv_net, r_net, o_net (no biases), layer_norm, optional own r-biases."""

    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        hd = cfg.n_head * cfg.d_head
        self.qkv_net = nn.Linear(cfg.d_model, 3 * hd, bias=False)
        self.r_net = nn.Linear(cfg.d_model, hd, bias=False)
        self.o_net = nn.Linear(hd, cfg.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.drop = nn.Dropout(cfg.dropout)
        self.dropatt = nn.Dropout(cfg.dropatt)
        self.pre_lnorm = cfg.pre_lnorm
        self.scale = 1.0 / math.sqrt(cfg.d_head)
        if cfg.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))

    def forward(self, h, r, cat, mask, r_w_bias, r_r_bias):
        """h [B,Q,D] layer input, r [K,D] positional embeddings, cat [B,K,D] = cat(mem, h)
        (h itself when there is no memory), mask [Q,K] bool. Returns [B,Q,D]."""
        B, Q, _ = h.shape
        H, Dh = self.n_head, self.d_head
        K = cat.size(1)
        x = self.layer_norm(cat) if self.pre_lnorm else cat
        w = self.qkv_net.weight  # [3*H*Dh, D]: rows q | k | v
        q = F.linear(x[:, K - Q:], w[:H * Dh])                 # queries only for new positions
        kv = F.linear(x, w[H * Dh:])                           # keys/values for memory + new
        q = q.view(B, Q, H, Dh).transpose(1, 2) * self.scale   # [B,H,Q,Dh], pre-scaled
        k, v = kv.view(B, K, 2, H, Dh).permute(2, 0, 3, 1, 4)  # [B,H,K,Dh] each
        rk = self.r_net(r).view(K, H, Dh).permute(1, 2, 0)     # [H,Dh,K]
        ac = torch.matmul(q + (r_w_bias * self.scale)[:, None, :], k.transpose(-1, -2))
        bd = rel_shift(torch.matmul(q + (r_r_bias * self.scale)[:, None, :], rk))
        # -inf and the reference's -1e30 give the same probabilities (no row is all masked).
        score = (ac + bd).masked_fill_(mask, float("-inf"))
        prob = self.dropatt(torch.softmax(score, dim=-1))
        vec = torch.matmul(prob, v).transpose(1, 2).reshape(B, Q, H * Dh)
        out = self.drop(self.o_net(vec))
        return h + out if self.pre_lnorm else self.layer_norm(h + out)


class PositionwiseFF(nn.Module):
    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.CoreNet = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_inner), nn.ReLU(inplace=True), nn.Dropout(cfg.dropout),
            nn.Linear(cfg.d_inner, cfg.d_model), nn.Dropout(cfg.dropout))
        self.layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_epsilon)
        self.pre_lnorm = cfg.pre_lnorm

    def forward(self, h):
        if self.pre_lnorm:
            return h + self.CoreNet(self.layer_norm(h))
        return self.layer_norm(h + self.CoreNet(h))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.dec_attn = RelAttention(cfg)
        self.pos_ff = PositionwiseFF(cfg)

    def forward(self, h, r, cat, mask, r_w_bias, r_r_bias):
        return self.pos_ff(self.dec_attn(h, r, cat, mask, r_w_bias, r_r_bias))


def _cluster_bounds(cfg):
    ends = [0] + list(cfg.cutoffs) + [cfg.vocab_size]
    return [(ends[i], ends[i + 1]) for i in range(len(ends) - 1)]


class AdaptiveEmbedding(nn.Module):
    """word_emb: emb_layers.i (Embedding), emb_projs.i ([d_model, d_emb_i]) as in HF."""

    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.cfg = cfg
        self.scale = cfg.d_model ** 0.5
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if cfg.div_val == 1:
            self.emb_layers.append(nn.Embedding(cfg.vocab_size, cfg.d_embed))
            if cfg.d_model != cfg.d_embed:
                self.emb_projs.append(nn.Parameter(torch.empty(cfg.d_model, cfg.d_embed)))
        else:
            for i, (lo, hi) in enumerate(_cluster_bounds(cfg)):
                d_i = cfg.d_embed // (cfg.div_val ** i)
                self.emb_layers.append(nn.Embedding(hi - lo, d_i))
                self.emb_projs.append(nn.Parameter(torch.empty(cfg.d_model, d_i)))

    def forward(self, ids):
        cfg = self.cfg
        if cfg.div_val == 1:
            e = self.emb_layers[0](ids)
            if len(self.emb_projs):
                e = F.linear(e, self.emb_projs[0])
            return e * self.scale
        flat = ids.reshape(-1)
        out = torch.zeros(flat.numel(), cfg.d_model, dtype=self.emb_projs[0].dtype,
                          device=ids.device)
        for i, (lo, hi) in enumerate(_cluster_bounds(cfg)):
            idx = ((flat >= lo) & (flat < hi)).nonzero().squeeze(1)
            if idx.numel() == 0:
                continue
            e = F.linear(self.emb_layers[i](flat[idx] - lo), self.emb_projs[i])
            out.index_copy_(0, idx, e)
        return (out * self.scale).view(*ids.shape, cfg.d_model)


class AdaptiveLogSoftmax(nn.Module):
    """crit: out_layers.i (Linear), out_projs.i, cluster_weight/cluster_bias (HF order: tail
    cluster i, 1-based, uses head column cutoffs[0] + i - 1, i.e. cluster row i - 1)."""

    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.cfg = cfg
        n_clusters = len(cfg.cutoffs)
        self.out_layers = nn.ModuleList()
        self.out_projs = nn.ParameterList()
        if n_clusters:
            self.cluster_weight = nn.Parameter(torch.zeros(n_clusters, cfg.d_embed))
            self.cluster_bias = nn.Parameter(torch.zeros(n_clusters))
        self.proj_index = []  # per cluster: index into out_projs, or None
        if cfg.div_val == 1:
            self.out_layers.append(nn.Linear(cfg.d_embed, cfg.vocab_size))
            for i in range(n_clusters + 1):
                if cfg.d_model != cfg.d_embed:
                    self.proj_index.append(len(self.out_projs))
                    self.out_projs.append(nn.Parameter(torch.empty(cfg.d_model, cfg.d_embed)))
                else:
                    self.proj_index.append(None)
        else:
            for i, (lo, hi) in enumerate(_cluster_bounds(cfg)):
                d_i = cfg.d_embed // (cfg.div_val ** i)
                self.proj_index.append(len(self.out_projs))
                self.out_projs.append(nn.Parameter(torch.empty(cfg.d_model, d_i)))
                self.out_layers.append(nn.Linear(d_i, hi - lo))

    def _proj(self, i):
        j = self.proj_index[i]
        return None if j is None else self.out_projs[j]

    @staticmethod
    def _logit(h, weight, bias, proj):
        if proj is not None:
            h = F.linear(h, proj.t())
        return F.linear(h, weight, bias)

    def _cluster_params(self, i):
        cfg = self.cfg
        lo, hi = _cluster_bounds(cfg)[i]
        if cfg.div_val == 1:
            w = self.out_layers[0].weight[lo:hi]
            b = self.out_layers[0].bias[lo:hi]
        else:
            w, b = self.out_layers[i].weight, self.out_layers[i].bias
        if i == 0 and len(cfg.cutoffs):
            w = torch.cat([w, self.cluster_weight], 0)
            b = torch.cat([b, self.cluster_bias], 0)
        return w, b, self._proj(i)

    def log_prob(self, h):
        """h [N, d_model] -> [N, vocab_size] log-probabilities."""
        cfg = self.cfg
        if not cfg.cutoffs:
            return F.log_softmax(self._logit(h, *self._cluster_params(0)), dim=-1)
        head = F.log_softmax(self._logit(h, *self._cluster_params(0)), dim=-1)
        c0 = cfg.cutoffs[0]
        parts = [head[:, :c0]]
        for i in range(1, len(cfg.cutoffs) + 1):
            tail = F.log_softmax(self._logit(h, *self._cluster_params(i)), dim=-1)
            parts.append(head[:, c0 + i - 1:c0 + i] + tail)
        return torch.cat(parts, dim=-1)

    def nll(self, h, target):
        """h [N, d_model], target [N] -> [N] negative log-likelihoods (natural log)."""
        if not self.cfg.cutoffs:
            logits = self._logit(h, *self._cluster_params(0))
            return F.cross_entropy(logits, target, reduction="none")
        return -self.log_prob(h).gather(1, target[:, None]).squeeze(1)


class TransformerXLBody(nn.Module):
    """`transformer`: word_emb, layers, (shared r_w_bias/r_r_bias when untie_r is off)."""

    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.cfg = cfg
        self.word_emb = AdaptiveEmbedding(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layer)])
        if not cfg.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))

    def forward(self, ids, mems=None):
        """ids [B,Q] -> (hidden [B,Q,D], new_mems: list of n_layer [B,<=mem_len,D])."""
        cfg = self.cfg
        B, Q = ids.shape
        mlen = 0 if not mems else mems[0].size(1)
        klen = mlen + Q
        h = self.drop(self.word_emb(ids))
        pos = torch.arange(klen - 1, -1, -1.0, device=ids.device)
        if cfg.clamp_len > 0:
            pos = pos.clamp(max=cfg.clamp_len)
        r = self.drop(sinusoid(pos, cfg.d_model).to(h.dtype))
        mask = attention_mask(Q, mlen, cfg.mem_len, cfg.same_length, ids.device)
        new_mems = []
        for li, layer in enumerate(self.layers):
            mem = mems[li] if mems else None
            cat = h if mem is None or mem.size(1) == 0 else torch.cat([mem, h], dim=1)
            if cfg.mem_len > 0:
                new_mems.append(cat[:, -cfg.mem_len:].detach())
            if cfg.untie_r:
                u, v = layer.dec_attn.r_w_bias, layer.dec_attn.r_r_bias
            else:
                u, v = self.r_w_bias, self.r_r_bias
            h = layer(h, r, cat, mask, u, v)
        return self.drop(h), (new_mems if cfg.mem_len > 0 else None)


class TransfoXLLM(nn.Module):
    """TransfoXLLMHeadModel layout: `transformer` + `crit`; weights tied as configured."""

    def __init__(self, cfg: XLConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = TransformerXLBody(cfg)
        self.crit = AdaptiveLogSoftmax(cfg)
        self.tie()
        self.reset_parameters()

    def tie(self):
        cfg = self.cfg
        emb, crit = self.transformer.word_emb, self.crit
        if cfg.tie_word_embeddings:
            for i in range(len(crit.out_layers)):
                crit.out_layers[i].weight = emb.emb_layers[i].weight
        for i, t in enumerate(cfg.tie_projs[:len(cfg.cutoffs) + 1]):
            j = crit.proj_index[i]
            if not t or j is None:
                continue
            if cfg.div_val == 1 and cfg.d_model != cfg.d_embed:
                crit.out_projs[j] = emb.emb_projs[0]
            elif cfg.div_val != 1:
                crit.out_projs[j] = emb.emb_projs[i]

    def reset_parameters(self, std=0.02, proj_std=0.01):
        """The reference's init: normal(0, 0.02) weights (Linear, embeddings, r-biases),
        normal(0, 0.01) projections, LayerNorm weight ~ N(1, 0.02), biases zero."""
        for name, p in self.named_parameters():
            if "layer_norm.weight" in name:
                nn.init.normal_(p, 1.0, std)
            elif name.endswith("bias") and "r_w_bias" not in name and "r_r_bias" not in name:
                nn.init.zeros_(p)
            elif "proj" in name:
                nn.init.normal_(p, 0.0, proj_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, ids, mems=None, targets=None):
        """ids [B,Q]; returns (nll [B,Q] if targets else log-probs [B,Q,V], new_mems)."""
        h, new_mems = self.transformer(ids, mems)
        flat = h.reshape(-1, h.size(-1))
        if targets is not None:
            out = self.crit.nll(flat, targets.reshape(-1)).view(ids.shape)
        else:
            out = self.crit.log_prob(flat).view(*ids.shape, -1)
        return out, new_mems

    # ---- export -------------------------------------------------------------------------
    def hf_tensors(self):
        """{HF tensor name: float32 numpy array}, tied tensors written under every name."""
        out = {}
        for name, p in self.state_dict(keep_vars=True).items():
            out[name] = p.detach().float().cpu().numpy().copy()
        return out

    def hf_config(self):
        cfg = self.cfg
        return {
            "vocab_size": cfg.vocab_size, "cutoffs": list(cfg.cutoffs), "d_model": cfg.d_model,
            "d_embed": cfg.d_embed, "n_head": cfg.n_head, "d_head": cfg.d_head,
            "d_inner": cfg.d_inner, "div_val": cfg.div_val, "pre_lnorm": bool(cfg.pre_lnorm),
            "n_layer": cfg.n_layer, "mem_len": cfg.mem_len, "tgt_len": cfg.tgt_len,
            "clamp_len": cfg.clamp_len, "same_length": bool(cfg.same_length),
            "proj_share_all_but_first": all(cfg.tie_projs[1:]) if len(cfg.tie_projs) > 1 else True,
            "tie_projs": list(cfg.tie_projs[:len(cfg.cutoffs) + 1]), "attn_type": 0,
            "untie_r": bool(cfg.untie_r), "tie_word_embeddings": bool(cfg.tie_word_embeddings),
            "layer_norm_epsilon": cfg.layer_norm_epsilon, "dropout": cfg.dropout,
            "dropatt": cfg.dropatt, "adaptive": bool(cfg.cutoffs),
        }


def load_hf_tensors(model: TransfoXLLM, tensors):
    """Loads {HF name: array} into the model. Every parameter must be present under at least
    one of its names (a tied tensor may appear once, as Hugging Face saves it); unknown names
    are an error."""
    named = model.state_dict(keep_vars=True)
    unknown = [n for n in tensors if n not in named]
    groups = {}
    for n, p in named.items():
        groups.setdefault(id(p), (p, []))[1].append(n)
    missing = [names[0] for p, names in groups.values() if not any(n in tensors for n in names)]
    if missing or unknown:
        raise KeyError(f"missing tensors {missing}, unknown tensors {unknown}")
    with torch.no_grad():
        for p, names in groups.values():
            for n in names:
                if n not in tensors:
                    continue
                t = torch.as_tensor(tensors[n])
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{n}: shape {tuple(t.shape)}, model wants {tuple(p.shape)}")
                p.copy_(t)


def config_from_hf(hf):
    """XLConfig from a config.json dict (TransfoXLConfig keys)."""
    if hf.get("attn_type", 0) != 0:
        raise ValueError(f"attn_type {hf.get('attn_type')} is not supported (only 0)")
    cutoffs = list(hf.get("cutoffs", []))
    tie_projs = hf.get("tie_projs")
    if tie_projs is None:
        tie_projs = [False] + [bool(hf.get("proj_share_all_but_first", True))] * len(cutoffs)
    return XLConfig(
        vocab_size=hf["vocab_size"], cutoffs=cutoffs, d_model=hf["d_model"],
        d_embed=hf.get("d_embed", hf["d_model"]), n_head=hf["n_head"], d_head=hf["d_head"],
        d_inner=hf["d_inner"], div_val=hf.get("div_val", 1),
        pre_lnorm=bool(hf.get("pre_lnorm", False)), n_layer=hf["n_layer"],
        tgt_len=hf.get("tgt_len", 128), mem_len=hf.get("mem_len", 0),
        clamp_len=hf.get("clamp_len", -1), same_length=bool(hf.get("same_length", False)),
        untie_r=bool(hf.get("untie_r", True)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", hf.get("tie_weight", True))),
        tie_projs=tie_projs, layer_norm_epsilon=hf.get("layer_norm_epsilon", 1e-5),
        dropout=0.0, dropatt=0.0)


def load_model_dir(path):
    """An xlserve / HF model directory (config.json + model.safetensors) -> TransfoXLLM."""
    import json
    import os

    from xlmodel import safetensors_io
    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    model = TransfoXLLM(config_from_hf(hf))
    tensors, _ = safetensors_io.read(os.path.join(path, "model.safetensors"))
    load_hf_tensors(model, tensors)
    model.eval()
    return model


@torch.no_grad()
def evaluate_stream(model, ids, tgt_len, mem_len=None, batch_streams=1):
    """Memory-carrying evaluation of one token stream (1-D LongTensor), empty initial memory:
    segments of tgt_len, each scored with the previous segments' memory. Returns per-position
    NLLs (natural log) [len(ids) - 1]: entry i = -log p(ids[i+1] | ids[0..i])."""
    was = model.training
    model.eval()
    mems = None
    if mem_len is not None:
        model.cfg.mem_len = mem_len
    dev = next(model.parameters()).device
    ids = ids.to(dev)
    out = []
    n = ids.numel() - 1
    for s in range(0, n, tgt_len):
        e = min(n, s + tgt_len)
        nll, mems = model(ids[s:e][None], mems, ids[s + 1:e + 1][None])
        out.append(nll[0])
    model.train(was)
    return torch.cat(out)


@torch.no_grad()
def evaluate_streams(model, ids, tgt_len, n_streams):
    """Faster approximate evaluation for periodic validation: the text is cut into n_streams
    equal contiguous pieces, scored as one batch, each with its own memory (empty at its
    start). Returns the mean NLL (natural log) over all scored positions."""
    n = (ids.numel() - 1) // n_streams
    if n_streams <= 1 or n < 2:
        return float(evaluate_stream(model, ids, tgt_len).mean())
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    idx = torch.arange(n_streams)[:, None] * n + torch.arange(n + 1)[None, :]
    seq = ids[idx].to(dev)
    mems, total, count = None, 0.0, 0
    for s in range(0, n, tgt_len):
        e = min(n, s + tgt_len)
        nll, mems = model(seq[:, s:e], mems, seq[:, s + 1:e + 1])
        total += float(nll.sum())
        count += nll.numel()
    model.train(was)
    return total / count
