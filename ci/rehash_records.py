"""Re-derive records' kernel_source_hash after a change of the HASHING SCHEME only (gluon_lab/staleness.py),
never after a code change. Usage:

    python ci/rehash_records.py OLD_SCHEME_HASHES.json OLD_TREE_NEW_SCHEME.json [--write]

OLD_SCHEME_HASHES.json: {op/variant: hash} of the old scheme at a base commit; OLD_TREE_NEW_SCHEME.json: the
new scheme run on that same base commit's code. For each variant whose new-scheme hash at the base commit
equals its new-scheme hash now (the code it reaches is unchanged), every record carrying the old-scheme hash
of the base commit is current code: its hash is replaced by the new one. Anything else is left as it is
(a stale record stays stale). Prints what it changes; writes only with --write.
(Used on 2026-12-01: the spec registry _SPECS stopped being hashed by content, so that adding an op no
longer marks every record stale; base commit 4201b25.)"""
import json
import sys
from pathlib import Path

from gluon_lab import registry


def main(argv):
    old, old_tree_new = (json.loads(Path(p).read_text()) for p in argv[:2])
    write = "--write" in argv
    now = {f"{v.op}/{v.name}": v.code_hash() for v in registry.all_variants()}
    mapping = {}
    for k, h in old.items():
        if k in now and old_tree_new.get(k) == now[k]:
            mapping[(k, h)] = now[k]
        else:
            print(f"not re-derived: {k} (its code changed since the base commit)")
    total = 0
    for path in sorted(Path("results").glob("*/*.jsonl")):
        lines = path.read_text().splitlines()
        out, n = [], 0
        for line in lines:
            r = json.loads(line)
            key = (f"{r.get('op')}/{r.get('variant')}", r.get("kernel_source_hash"))
            if key in mapping and mapping[key] != key[1]:
                r["kernel_source_hash"] = mapping[key]
                n += 1
                out.append(json.dumps(r, sort_keys=True, allow_nan=False))
            else:
                out.append(line)
        print(f"{path}: {n} of {len(lines)} records re-derived")
        total += n
        if write and n:
            path.write_text("\n".join(out) + "\n")
    print(f"{total} records {'rewritten' if write else 'would be rewritten'}")


if __name__ == "__main__":
    main(sys.argv[1:])
