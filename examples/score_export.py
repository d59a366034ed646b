#!/usr/bin/env python3
"""Scores a Criteo TSV in plain PyTorch from a tessera_export folder.

    score_export.py EXPORT_DIR DEV_TSV [--expect_auc AUC]

Nothing of Tessera is imported: the model is rebuilt from EXPORT_DIR/model.json
(docs/operations.md, "Exporting a trained model") and its tensors loaded with
safetensors.torch (or numpy for an npy export); the TSV is preprocessed as
model.json's features.hashing says (shared/data/criteo_kaggle_8k/REFERENCE.md).
Prints the AUC; with --expect_auc (the job's own evaluation, summary.json's
eval.auc) exits 1 unless they agree within 1e-6.
"""
import argparse
import json
import math
import os
import sys

import torch
from torch import nn

FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def criteo_row(column, value, rows):
    """FNV1a64(byte(column) ++ bytes(value)) mod rows (trainer/fnv1a.h)."""
    h = FNV_OFFSET
    for b in bytes([column]) + value:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h % rows


def load_tensors(out, desc):
    if desc["format"] == "safetensors":
        from safetensors.torch import load_file
        return load_file(os.path.join(out, "model.safetensors"))
    import numpy as np
    return {t["name"]: torch.from_numpy(np.load(os.path.join(out, t["file"])))
            for t in desc["tensors"] if t["part"] == "model"}


class ExportedDlrm(nn.Module):
    """The DLRM of model.json: bottom MLP, [bottom | pooled embeddings], top MLP."""

    def __init__(self, desc, sd):
        super().__init__()
        layers = desc["dense"]["layers"]
        linear = lambda l: nn.Linear(l["in"], l["out"])
        self.bottom = nn.ModuleList(linear(l) for l in layers if l["name"].startswith("bottom."))
        self.top = nn.ModuleList(linear(l) for l in layers if l["name"].startswith("top."))
        self.load_state_dict({k: v for k, v in sd.items() if not k.startswith("tables.")})
        self.tables = nn.ModuleDict()
        self.feature_table = {}
        for t in desc["tables"]:
            if t["materialized_only"]:
                sys.exit("export with --materialized_only: export full tables to score")
            mode = {"SUM": "sum", "MEAN": "mean"}[t["pooling"].upper()]
            self.tables[t["name"]] = nn.EmbeddingBag.from_pretrained(sd["tables.%s.weight" % t["name"]], mode=mode)
            for f in t["feature_names"]:
                self.feature_table[f] = t["name"]
        self.features = desc["features"]["order"]

    def forward(self, dense, ids):
        x = dense
        for layer in self.bottom:
            x = torch.relu(layer(x))
        parts = [x] + [self.tables[self.feature_table[f]](ids[:, i:i + 1]) for i, f in enumerate(self.features)]
        x = torch.cat(parts, dim=1)
        for i, layer in enumerate(self.top):
            x = layer(x)
            if i + 1 < len(self.top):
                x = torch.relu(x)
        return x[:, 0]


def read_criteo(path, desc):
    rows = {f: t["num_embeddings"] for t in desc["tables"] for f in t["feature_names"]}
    dense, ids, labels = [], [], []
    with open(path, "rb") as f:
        for line in f:
            fields = line.rstrip(b"\n").rstrip(b"\r").split(b"\t")
            labels.append(float(fields[0]))
            dense.append([math.log(1.0 + max(int(v) if v else 0, 0)) for v in fields[1:14]])
            ids.append([criteo_row(int(feat[1:]) - 1, fields[13 + int(feat[1:])], rows[feat])
                        for feat in desc["features"]["order"]])
    return torch.tensor(dense, dtype=torch.float32), torch.tensor(ids), labels


def roc_auc(scores, labels):
    """Mann-Whitney U with ties at their mean rank (trainer/eval_metrics.cc)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    rank_sum, positives, i = 0.0, 0, 0
    while i < len(order):
        j = i
        while j < len(order) and scores[order[j]] == scores[order[i]]:
            j += 1
        mean_rank = (i + 1 + j) / 2.0
        for k in range(i, j):
            if labels[order[k]] > 0.5:
                rank_sum += mean_rank
                positives += 1
        i = j
    negatives = len(scores) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export_dir")
    ap.add_argument("tsv")
    ap.add_argument("--expect_auc", type=float)
    args = ap.parse_args()
    desc = json.load(open(os.path.join(args.export_dir, "model.json")))
    if desc["features"]["hashing"]["kind"] != "criteo_fnv1a64":
        sys.exit("this export was not trained on Criteo data")
    model = ExportedDlrm(desc, load_tensors(args.export_dir, desc)).eval()
    dense, ids, labels = read_criteo(args.tsv, desc)
    with torch.no_grad():
        logits = model(dense, ids).tolist()
    auc = roc_auc(logits, labels)
    print("examples %d auc %.9f" % (len(labels), auc))
    if args.expect_auc is not None:
        diff = abs(auc - args.expect_auc)
        print("job's own evaluation %.9f, |difference| %.3g" % (args.expect_auc, diff))
        return 0 if diff <= 1e-6 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
