"""A re-statement (for tests only) of the module structure and forward semantics of the paper
authors' PyTorch MemTransformerLM (kimiyoung/transformer-xl, pytorch/mem_transformer.py and
utils/proj_adaptive_softmax.py), attn_type 0, written independently for xlserve's converter
tests. It is deliberately laid out the authors' way: time-major [len, batch] tensors, one pair
of r_w_bias / r_r_bias at model level shared by all layers, n_layer + 1 memories, an
adaptive softmax whose tail cluster i reads head column -i (cluster row n_clusters - i), and
whole-model pickling under the module name `mem_transformer` (as their train.py saves model.pt).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionalEmbedding(nn.Module):
    def __init__(self, demb):
        super().__init__()
        self.demb = demb
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb)))

    def forward(self, pos_seq):
        ang = torch.outer(pos_seq, self.inv_freq)
        return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)[:, None, :]


class PositionwiseFF(nn.Module):
    def __init__(self, d_model, d_inner, pre_lnorm):
        super().__init__()
        self.d_model, self.d_inner, self.pre_lnorm = d_model, d_inner, pre_lnorm
        self.CoreNet = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(0.0),
                                     nn.Linear(d_inner, d_model), nn.Dropout(0.0))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, x):
        if self.pre_lnorm:
            return x + self.CoreNet(self.layer_norm(x))
        return self.layer_norm(x + self.CoreNet(x))


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head, pre_lnorm):
        super().__init__()
        self.n_head, self.d_model, self.d_head, self.pre_lnorm = n_head, d_model, d_head, pre_lnorm
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.scale = 1.0 / math.sqrt(d_head)

    @staticmethod
    def _rel_shift(x):
        # x: [qlen, klen, bsz, n_head]; shift row i left by (qlen - 1 - i).
        q, k = x.shape[:2]
        pad = torch.zeros((q, 1) + x.shape[2:], dtype=x.dtype)
        xp = torch.cat([pad, x], dim=1).view((k + 1, q) + x.shape[2:])
        return xp[1:].reshape(x.shape)

    def forward(self, w, r, r_w_bias, r_r_bias, mask, mems):
        qlen, bsz = w.shape[:2]
        cat = w if mems is None or mems.numel() == 0 else torch.cat([mems, w], 0)
        heads = self.qkv_net(self.layer_norm(cat) if self.pre_lnorm else cat)
        q, k, v = torch.chunk(heads, 3, dim=-1)
        q = q[-qlen:]
        klen = k.shape[0]
        H, D = self.n_head, self.d_head
        q = q.reshape(qlen, bsz, H, D)
        k = k.reshape(klen, bsz, H, D)
        v = v.reshape(klen, bsz, H, D)
        rk = self.r_net(r).reshape(r.shape[0], H, D)
        ac = torch.einsum("ibnd,jbnd->ijbn", q + r_w_bias, k)
        bd = self._rel_shift(torch.einsum("ibnd,jnd->ijbn", q + r_r_bias, rk))
        score = (ac + bd) * self.scale
        score = score.masked_fill(mask[:, :, None, None], -float("inf"))
        prob = F.softmax(score, dim=1)
        vec = torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, bsz, H * D)
        out = self.o_net(vec)
        return w + out if self.pre_lnorm else self.layer_norm(w + out)


class RelPartialLearnableDecoderLayer(nn.Module):
    def __init__(self, n_head, d_model, d_head, d_inner, pre_lnorm):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(n_head, d_model, d_head, pre_lnorm)
        self.pos_ff = PositionwiseFF(d_model, d_inner, pre_lnorm)

    def forward(self, x, r, u, v, mask, mems):
        return self.pos_ff(self.dec_attn(x, r, u, v, mask, mems))


class AdaptiveEmbedding(nn.Module):
    def __init__(self, n_token, d_embed, d_proj, cutoffs, div_val):
        super().__init__()
        self.n_token, self.d_embed, self.d_proj, self.div_val = n_token, d_embed, d_proj, div_val
        self.cutoffs = cutoffs + [n_token]
        self.cutoff_ends = [0] + self.cutoffs
        self.emb_scale = d_proj ** 0.5
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if div_val == 1:
            self.emb_layers.append(nn.Embedding(n_token, d_embed))
            if d_proj != d_embed:
                self.emb_projs.append(nn.Parameter(torch.randn(d_proj, d_embed) * 0.1))
        else:
            for i in range(len(self.cutoffs)):
                lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
                d_i = d_embed // div_val ** i
                self.emb_layers.append(nn.Embedding(hi - lo, d_i))
                self.emb_projs.append(nn.Parameter(torch.randn(d_proj, d_i) * 0.1))

    def forward(self, inp):
        if self.div_val == 1:
            e = self.emb_layers[0](inp)
            if self.d_proj != self.d_embed:
                e = F.linear(e, self.emb_projs[0])
        else:
            flat = inp.reshape(-1)
            e = torch.zeros(flat.numel(), self.d_proj)
            for i in range(len(self.cutoffs)):
                lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
                sel = ((flat >= lo) & (flat < hi)).nonzero().reshape(-1)
                if sel.numel():
                    e[sel] = F.linear(self.emb_layers[i](flat[sel] - lo), self.emb_projs[i])
            e = e.reshape(inp.shape + (self.d_proj,))
        return e * self.emb_scale


class ProjectedAdaptiveLogSoftmax(nn.Module):
    def __init__(self, n_token, d_embed, d_proj, cutoffs, div_val):
        super().__init__()
        self.n_token, self.d_embed, self.d_proj, self.div_val = n_token, d_embed, d_proj, div_val
        self.cutoffs = cutoffs + [n_token]
        self.cutoff_ends = [0] + self.cutoffs
        self.n_clusters = len(self.cutoffs) - 1
        if self.n_clusters:
            self.cluster_weight = nn.Parameter(torch.randn(self.n_clusters, d_embed) * 0.3)
            self.cluster_bias = nn.Parameter(torch.randn(self.n_clusters) * 0.3)
        self.out_layers = nn.ModuleList()
        self.out_projs = nn.ParameterList()
        if div_val == 1:
            for _ in range(len(self.cutoffs)):
                self.out_projs.append(nn.Parameter(torch.randn(d_proj, d_embed) * 0.1)
                                      if d_proj != d_embed else None)
            self.out_layers.append(nn.Linear(d_embed, n_token))
        else:
            for i in range(len(self.cutoffs)):
                lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
                d_i = d_embed // div_val ** i
                self.out_projs.append(nn.Parameter(torch.randn(d_proj, d_i) * 0.1))
                self.out_layers.append(nn.Linear(d_i, hi - lo))

    def _proj(self, i):
        try:
            return self.out_projs[i]
        except (IndexError, KeyError, AttributeError):
            return None

    def _logit(self, h, w, b, proj):
        if proj is not None:
            h = F.linear(h, proj.t().contiguous())
        return F.linear(h, w, b)

    def log_prob(self, h):
        """[N, d_proj] -> [N, n_token], the authors' cluster order (head column -i)."""
        ws, bs = [], []
        for i in range(len(self.cutoffs)):
            lo, hi = self.cutoff_ends[i], self.cutoff_ends[i + 1]
            if self.div_val == 1:
                w, b = self.out_layers[0].weight[lo:hi], self.out_layers[0].bias[lo:hi]
            else:
                w, b = self.out_layers[i].weight, self.out_layers[i].bias
            if i == 0 and self.n_clusters:
                w = torch.cat([w, self.cluster_weight], 0)
                b = torch.cat([b, self.cluster_bias], 0)
            ws.append(w)
            bs.append(b)
        head = F.log_softmax(self._logit(h, ws[0], bs[0], self._proj(0)), dim=-1)
        if not self.n_clusters:
            return head
        parts = [head[:, :self.cutoffs[0]]]
        for i in range(1, len(self.cutoffs)):
            tail = F.log_softmax(self._logit(h, ws[i], bs[i], self._proj(i)), dim=-1)
            parts.append(head[:, -i, None] + tail)
        return torch.cat(parts, dim=-1)


class MemTransformerLM(nn.Module):
    def __init__(self, n_token, n_layer, n_head, d_model, d_head, d_inner, d_embed=None,
                 div_val=1, cutoffs=(), tie_weight=True, tie_projs=(False,), pre_lnorm=False,
                 tgt_len=8, mem_len=16, ext_len=0, same_length=False, clamp_len=-1):
        super().__init__()
        d_embed = d_model if d_embed is None else d_embed
        cutoffs = list(cutoffs)
        self.n_token, self.d_embed, self.d_model = n_token, d_embed, d_model
        self.n_head, self.d_head, self.n_layer = n_head, d_head, n_layer
        self.tgt_len, self.mem_len, self.ext_len = tgt_len, mem_len, ext_len
        self.same_length, self.clamp_len, self.attn_type = same_length, clamp_len, 0
        self.sample_softmax = -1
        self.word_emb = AdaptiveEmbedding(n_token, d_embed, d_model, cutoffs, div_val)
        self.drop = nn.Dropout(0.0)
        self.layers = nn.ModuleList([RelPartialLearnableDecoderLayer(
            n_head, d_model, d_head, d_inner, pre_lnorm) for _ in range(n_layer)])
        self.crit = ProjectedAdaptiveLogSoftmax(n_token, d_embed, d_model, cutoffs, div_val)
        if tie_weight:
            for i in range(len(self.crit.out_layers)):
                self.crit.out_layers[i].weight = self.word_emb.emb_layers[i].weight
        for i, tie in enumerate(tie_projs):
            if tie and div_val == 1 and d_model != d_embed:
                self.crit.out_projs[i] = self.word_emb.emb_projs[0]
            elif tie and div_val != 1:
                self.crit.out_projs[i] = self.word_emb.emb_projs[i]
        self.pos_emb = PositionalEmbedding(d_model)
        self.r_w_bias = nn.Parameter(torch.randn(n_head, d_head) * 0.3)
        self.r_r_bias = nn.Parameter(torch.randn(n_head, d_head) * 0.3)

    def init_mems(self):
        return [torch.empty(0) for _ in range(self.n_layer + 1)]

    def _forward(self, dec_inp, mems):
        qlen, bsz = dec_inp.shape
        x = self.word_emb(dec_inp)
        mlen = mems[0].shape[0] if mems[0].numel() else 0
        klen = mlen + qlen
        ones = torch.ones(qlen, klen)
        if self.same_length:
            mask_len = klen - self.mem_len
            shift = qlen - mask_len if mask_len > 0 else qlen
            mask = (torch.triu(ones, 1 + mlen) + torch.tril(ones, -shift)) > 0
        else:
            mask = torch.triu(ones, 1 + mlen) > 0
        pos = torch.arange(klen - 1, -1, -1.0)
        if self.clamp_len > 0:
            pos = pos.clamp(max=self.clamp_len)
        r = self.pos_emb(pos)[:, 0, :]
        hids = [x]
        for i, layer in enumerate(self.layers):
            x = layer(x, r, self.r_w_bias, self.r_r_bias, mask, mems[i])
            hids.append(x)
        new_mems = []
        end = mlen + qlen
        beg = max(0, end - self.mem_len)
        for h, m in zip(hids, mems):
            c = h if m.numel() == 0 else torch.cat([m, h], 0)
            new_mems.append(c[beg:end].detach())
        return x, new_mems

    @torch.no_grad()
    def eval_nll(self, ids, tgt_len):
        """Reference evaluation loop over a 1-D id tensor: segments of tgt_len, memory
        carried, empty at the start. Returns [len(ids) - 1] NLLs (nats)."""
        mems = self.init_mems()
        out = []
        n = ids.numel() - 1
        for s in range(0, n, tgt_len):
            e = min(n, s + tgt_len)
            h, mems = self._forward(ids[s:e, None], mems)
            lp = self.crit.log_prob(h.reshape(-1, h.shape[-1]))
            out.append(-lp.gather(1, ids[s + 1:e + 1, None]).reshape(-1))
        return torch.cat(out)
