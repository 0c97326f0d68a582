"""The curves of a sweep's runs, small enough to commit beside its report:
one CSV row per logged step of every point (loss, validation loss, gradient
norm, LR, layer-0 and largest attention logit, largest output logit, mean
log Z), gzip-compressed. The full metrics.jsonl (every monitor statistic)
stays in the run directories.

    .venv/bin/python scripts/studies/sweep_curves.py SWEEP_DIR OUT.csv.gz
"""
import csv
import gzip
import io
import json
import sys
from pathlib import Path

COLUMNS = ["point", "step", "lr", "loss", "val_loss", "grad_norm", "attn_l0_max_logit", "attn_max_logit",
           "output_max_logit", "output_mean_log_z"]


def row(point, rec):
    attn = rec.get("attn") if isinstance(rec.get("attn"), list) else []
    logits = [a.get("max_logit") for a in attn if isinstance(a, dict) and isinstance(a.get("max_logit"), (int, float))]
    out = rec.get("output") if isinstance(rec.get("output"), dict) else {}
    return [point, rec.get("step"), rec.get("lr"), rec.get("loss"), rec.get("val_loss"), rec.get("grad_norm"),
            logits[0] if logits else None, max(logits) if logits else None, out.get("max_logit"), out.get("mean_log_z")]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sweep, out = Path(sys.argv[1]), Path(sys.argv[2])
    manifest = json.loads((sweep / "sweep.json").read_text())
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(COLUMNS)
    rows = 0
    for p in manifest["points"]:
        path = sweep / p["name"] / "metrics.jsonl"
        if not path.is_file():
            continue
        for line in path.open():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash
            if isinstance(rec, dict) and isinstance(rec.get("step"), int):
                w.writerow(["" if v is None else v for v in row(p["name"], rec)])
                rows += 1
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(text.getvalue().encode())
    print(f"{out}: {rows} rows from {len(manifest['points'])} points")


if __name__ == "__main__":
    main()
