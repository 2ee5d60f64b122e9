"""Prints the key structure of a fio-format JSON file, in file order, one object per line:
`PATH<TAB>key,key,...`. Maps keyed by numbers (percentile, bins) print `PATH<TAB>#numeric` when
their keys ascend numerically and `PATH<TAB>#unordered` when not; arrays of jobs are walked with
their index, other arrays are not. Used by tests/fio_interop.rs to diff nines against fio."""
import json
import sys

NUMERIC = {"percentile", "bins"}


def walk(path, value, out):
    if isinstance(value, dict):
        name = path.rsplit("/", 1)[-1]
        if name in NUMERIC:
            keys = [float(k) for k in value]
            ok = all(a < b for a, b in zip(keys, keys[1:]))
            out.append(f"{path}\t#{'numeric' if ok else 'unordered'}")
            return
        out.append(f"{path}\t{','.join(value)}")
        for k, v in value.items():
            walk(f"{path}/{k}", v, out)
    elif isinstance(value, list) and path.endswith("/jobs"):
        for i, v in enumerate(value):
            walk(f"{path}[{i}]", v, out)


out = []
with open(sys.argv[1]) as f:
    walk("", json.load(f), out)
print("\n".join(out))
