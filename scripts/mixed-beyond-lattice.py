"""How an emulated mixed step of more prompt tokens than the mixed lattice measured is priced,
held out against measured rows: each lattice row of one uncached 8,192-token prompt is
removed from the profile and priced from what is left, two ways side by side:
  - from the prefill rows (emulate/pricing.py _prompts_beside_decodes: the prompts' prefill
    row plus the decodes' share at the lattice's new top, 4,096 tokens), as the emulation
    prices such steps now;
  - along the line through the lattice's two top rows (emulate/outside.py extend_tokens), as
    it priced them before.
  python scripts/mixed-beyond-lattice.py PROFILE [PROFILE ...]"""

import dataclasses
import sys

from pytest_sdbench.emulate.outside import extend_tokens
from pytest_sdbench.emulate.pricing import ProfilePrice
from pytest_sdbench.emulate.step_shape import StepShape
from pytest_sdbench.fidelity.predict_mixed import mixed_rows
from pytest_sdbench.run.profile import read_profile

HELD_OUT = 8192   # the prompt tokens of the lattice's top rows, removed and priced


def main(paths: list[str]) -> None:
    print("| profile | decode batch | measured ms | from the prefill rows ms | error | "
          "along the line ms | error |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        artifact = read_profile(path)
        held = [r for r in mixed_rows(artifact)
                if (r.prefill_batch, r.cached_tokens, r.prefill_tokens) == (1, 0, HELD_OUT)]
        out = {r.point_index for r in held}
        price = ProfilePrice(dataclasses.replace(
            artifact, mixed=tuple(o for o in artifact.mixed if o.point_index not in out)))
        interp = price.interpolator
        for row in held:
            kv = round(row.context * row.decode_batch)
            got = price(StepShape(decode_requests=row.decode_batch, decode_kv_tokens=kv,
                                  draft_tokens=row.decode_batch * price.draft_depth,
                                  prefill_requests=1, prefill_tokens=HELD_OUT,
                                  total_scheduled_tokens=row.scheduled_tokens))
            if "decodes_beside_at" not in (got.priced_at or {}):
                raise SystemExit(f"decode batch {row.decode_batch}: not priced from the prefill "
                                 f"rows ({got.how}); the first column would not be theirs")
            spans = [r.prefill_tokens for r in interp.lattice
                     if r.decode_batch == row.decode_batch and r.graph_mode == got.graph_mode]

            def at(tokens: int, i=interp, b=row.decode_batch, kv=kv, mode=got.graph_mode):
                return i.price_mixed(b, 1, tokens, mode, decode_kv_tokens=kv)
            top = max(spans)
            line, _ = extend_tokens(at(top), {"prefill_tokens": top}, at, spans, HELD_OUT, [])
            along = line.seconds or 0.0
            print(f"| {artifact.run_id[:12]} | {row.decode_batch} | {row.seconds * 1e3:.2f} | "
                  f"{got.seconds * 1e3:.2f} | {got.seconds / row.seconds - 1:+.1%} | "
                  f"{along * 1e3:.2f} | {along / row.seconds - 1:+.1%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
