"""What a change of the emulation's pricing moves in an emulated run: every step of a step
log (`sdbench emulate --out DIR`: DIR/steps.jsonl) priced again from PROFILE by today's
emulate/pricing.py, against the price the emulation slept. Prints the steps whose price
changed (their shape, the price then and now) and the totals. Pure: no engine, no vLLM.
  python scripts/reprice-step-log.py PROFILE STEPS_JSONL"""

import dataclasses
import sys

from pytest_sdbench.emulate.pricing import ProfilePrice
from pytest_sdbench.emulate.step_shape import StepShape
from pytest_sdbench.emulate.steplog import read_step_log

SHAPE = tuple(f.name for f in dataclasses.fields(StepShape))
CHANGED_S = 1e-6   # below this a price is the same (the log rounds nothing; floats do)


def main(profile: str, steps: str) -> None:
    price = ProfilePrice.from_path(profile)
    log = read_step_log(steps)
    then = now = 0.0
    print("| step | prompts | prompt tokens | decodes | slept price ms | today's price ms | "
          "change ms | today's basis |")
    print("|---|---|---|---|---|---|---|---|")
    changed = 0
    for step in log.steps:
        priced = price(StepShape(**{name: step[name] for name in SHAPE}))
        then, now = then + step["price_s"], now + priced.seconds
        delta = priced.seconds - step["price_s"]
        if abs(delta) > CHANGED_S:
            changed += 1
            print(f"| {step['step']} | {step['prefill_requests']} | {step['prefill_tokens']} "
                  f"| {step['decode_requests']} | {step['price_s'] * 1e3:.1f} | "
                  f"{priced.seconds * 1e3:.1f} | {delta * 1e3:+.1f} | {priced.basis} |")
    print(f"\n{changed} of {len(log.steps)} steps priced otherwise today; all steps "
          f"{then:.3f} s slept, {now:.3f} s today ({(now / then - 1) * 100:+.2f}%)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
