#!/usr/bin/python3
"""Converts Transformer-XL checkpoints to an xlserve model directory (config.json,
model.safetensors, vocab.txt for word-level models). Untrusted input is never executed: see
tools/xlconvert/torchfile.py. Works without torch installed.

  convert.py hf SRC_DIR OUT_DIR       Hugging Face TransfoXL (config.json + model.safetensors or
                                      pytorch_model.bin, vocab.pkl / vocab.bin)
  convert.py authors CKPT OUT_DIR     kimiyoung/transformer-xl pytorch checkpoint: a state_dict or
                                      the whole pickled MemTransformerLM (model.pt) of train.py;
                                      give the hyperparameters it lacks as in the run script,
                                      e.g. --mem_len 1600 --same_length --clamp_len 1000
  convert.py pull NAME|URL|DIR OUT_DIR
                                      downloads a Hugging Face hub repository (e.g.
                                      transfo-xl/transfo-xl-wt103), a directory URL or takes a
                                      local directory (HF layout, or the authors' model.pt +
                                      cache.pt, or their released TensorFlow archive), with
                                      resume and checksums, and converts it
  convert.py tf SOURCE OUT_DIR        kimiyoung/transformer-xl TensorFlow checkpoint (the
                                      released tf_enwik8/ ... tf_lm1b/ archive directory, its
                                      model/ directory or a prefix such as model/model.ckpt-0);
                                      --preset enwik8|text8|wt103|lm1b gives the evaluation
                                      script's flags; --weights bf16 stores bf16 matrices

The tokenizer kind (config.json "xlserve_tokenizer") is chosen from the vocabulary file:
transfo_xl for a Hugging Face vocab.pkl / vocab.bin, byte_table / char_table / words for the
authors' cache.pt (enwik8 / text8 / word corpora); --tokenizer and --tokenizer-option override.
"""
import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from xlconvert import hub, tf_convert, tf_presets, vocab_kinds  # noqa: E402
from xlconvert.sources import ConvertError, convert_authors, convert_hf  # noqa: E402


def _ints(s):
    return [int(x) for x in s.replace(",", " ").split()] if s.strip() else []


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("source_kind", choices=["hf", "authors", "pull", "tf"])
    ap.add_argument("source", help="HF directory, the authors' checkpoint file, or (pull) a hub "
                    "repository name, a directory URL or a local directory")
    ap.add_argument("out", help="output model directory")
    ap.add_argument("--vocab", help="vocabulary: vocab.pkl, vocab.bin, the authors' cache.pt, "
                    "or vocab.txt (one symbol per line)")
    ap.add_argument("--tokenizer", choices=list(vocab_kinds.KINDS),
                    help="override the kind chosen from the vocabulary; bytes: a 256-symbol "
                    "model whose ids are byte values (no vocab file)")
    ap.add_argument("--tokenizer-option", dest="tokenizer_option", action="append", default=[],
                    metavar="KEY=VALUE", help="a tokenizer setting, VALUE as JSON when it parses "
                    "(e.g. unknown=drop, lower_case=true, delimiter=null); repeatable")
    ap.add_argument("--revision", default="main", help="pull: hub branch, tag or commit")
    ap.add_argument("--endpoint", help="pull: hub URL (default $XL_HUB_ENDPOINT or "
                    "https://huggingface.co)")
    ap.add_argument("--retries", type=int, default=4,
                    help="pull: resumed attempts per file after a broken connection")
    ap.add_argument("--keep-download", action="store_true",
                    help="pull: keep the downloaded source files in OUT_DIR/.download")
    ap.add_argument("--mem-len", "--mem_len", dest="mem_len", type=int)
    ap.add_argument("--tgt-len", "--tgt_len", dest="tgt_len", type=int)
    ap.add_argument("--clamp-len", "--clamp_len", dest="clamp_len", type=int)
    ap.add_argument("--same-length", "--same_length", dest="same_length", action="store_const",
                    const=True, default=None)
    ap.add_argument("--no-same-length", dest="same_length", action="store_const", const=False)
    ap.add_argument("--pre-lnorm", "--pre_lnorm", dest="pre_lnorm", action="store_const",
                    const=True, default=None)
    ap.add_argument("--cutoffs", type=_ints, help="e.g. 20000,40000,200000 (authors' models "
                    "with div_val 1 and an adaptive softmax)")
    ap.add_argument("--div-val", "--div_val", dest="div_val", type=int)
    ap.add_argument("--layer-norm-epsilon", dest="layer_norm_epsilon", type=float)
    tf = ap.add_argument_group("tf (the authors' TensorFlow checkpoints)")
    tf.add_argument("--preset", choices=sorted(tf_presets.PRESETS),
                    help="the released model's flags (tf/sota/NAME.sh), checked against the "
                    "checkpoint; --mem-len etc. override the evaluation settings")
    tf.add_argument("--corpus-info", dest="corpus_info",
                    help="corpus-info.json (default: the archive's data/corpus-info.json)")
    tf.add_argument("--weights", choices=["f32", "bf16"], default="f32",
                    help="stored type of the weight matrices (int8 is made at load: "
                    "xlserve --weights int8)")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    ov = {k: getattr(args, k) for k in ("mem_len", "tgt_len", "clamp_len", "same_length",
                                         "pre_lnorm", "cutoffs", "div_val",
                                         "layer_norm_epsilon")}
    try:
        topts = dict(vocab_kinds.parse_option(o) for o in args.tokenizer_option)
    except vocab_kinds.VocabError as e:
        print(f"convert.py: error: {e}", file=sys.stderr)
        return 2
    try:
        if args.source_kind == "tf":
            cfg = tf_convert.convert_tf(args.source, args.out, args.preset, args.vocab,
                                        args.corpus_info, ov, args.weights,
                                        tokenizer=args.tokenizer, tokenizer_options=topts)
        elif args.source_kind == "pull":
            cfg = pull(args, ov, topts)
        elif args.source_kind == "hf":
            cfg = convert_hf(args.source, args.out, ov, args.vocab, args.tokenizer, topts)
        else:
            cfg = convert_authors(args.source, args.out, ov, args.vocab, args.tokenizer, topts)
    except (ConvertError, hub.HubError, tf_convert.ConvertError) as e:
        print(f"convert.py: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {cfg['n_layer']} layers, d_model {cfg['d_model']}, vocab "
          f"{cfg['vocab_size']} ({cfg['xlserve_tokenizer']}), cutoffs {cfg['cutoffs']}, "
          f"div_val {cfg['div_val']}, mem_len {cfg['mem_len']}, same_length {cfg['same_length']}, "
          f"clamp_len {cfg['clamp_len']}")
    if args.source_kind == "pull":
        print("serve it with:")
        print(f"  xlserve serve --model {shlex.quote(os.path.abspath(args.out))}")
    return 0


def pull(args, ov, topts):
    """convert.py pull: fetch (hub / URL) or take (local directory), then convert."""
    remote = hub.remote_for(args.source, args.endpoint, args.revision)
    dl = None
    if remote is None and tf_convert.is_tf_archive(args.source):
        return tf_convert.convert_tf(args.source, args.out, args.preset, args.vocab,
                                     args.corpus_info, ov, args.weights,
                                     tokenizer=args.tokenizer, tokenizer_options=topts)
    if remote is None:
        layout, src = hub.local_layout(args.source)
    else:
        dl = os.path.join(args.out, ".download")
        print(f"fetching {remote.label} into {dl}", file=sys.stderr)
        layout, src = hub.fetch(remote, dl, retries=max(0, args.retries))
    if layout == "hf":
        cfg = convert_hf(src, args.out, ov, args.vocab, args.tokenizer, topts)
    else:
        cfg = convert_authors(os.path.join(src, "model.pt"), args.out, ov,
                              args.vocab or os.path.join(src, "cache.pt"), args.tokenizer, topts)
    if dl is not None and not args.keep_download:
        hub.remove_download(dl)
    return cfg


if __name__ == "__main__":
    sys.exit(main())
