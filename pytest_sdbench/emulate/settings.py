"""The emulator's settings, as the engine core reads them: VllmConfig.additional_config
["sdbench_emulate"] (the `--additional-config` engine argument, in vLLM 0.26 and 0.32), else
the JSON in the environment variable SDBENCH_EMULATE.

Keys:

- profile (path; required): the collected artifact whose rows price every step.
- num_gpu_blocks (int; default: the profile's kv_capacity.num_blocks): the KV capacity in
  blocks. Never derived from memory: determine_available_memory reports exactly this many
  blocks' bytes, and the executor sets cache_config.num_gpu_blocks_override so that vLLM's
  planner lands on the same number however it rounds.
- acceptance_length (float; default: the profile's synthetic acceptance length): the AL the
  drafts are accepted at. It must be the profile's: its decode rows were measured there.
- async_scheduling (bool | null): true turns vLLM's async scheduling back on in the engine
  core where the platform forced it off (the CPU platform always does: see executor.py);
  false turns it off; null leaves vLLM's decision. `sdbench emulate` passes the profiled
  engine's (identity.async_scheduling).
- seed (int, default 0): seeds the acceptance draws and the token ids (one RNG).
- step_log (path | null): JSON Lines, a header and one record per executed step
  (clock.StepRecord).
- wake_lead ("adaptive" | seconds, default "adaptive"): how early to ask the OS to wake
  before a step's deadline; adaptive tracks the measured wake-up latency so that the wake
  lands on the deadline on average, without spinning.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from . import SETTINGS_ENV, SETTINGS_KEY

if TYPE_CHECKING:
    from vllm.config import VllmConfig

_KEYS = ("profile", "num_gpu_blocks", "acceptance_length", "async_scheduling", "seed",
         "step_log", "wake_lead")


class SettingsError(ValueError):
    """The emulator's settings are unusable; the message names the key."""


@dataclass(frozen=True)
class EmulationSettings:
    profile: str
    num_gpu_blocks: int | None = None
    acceptance_length: float | None = None
    async_scheduling: bool | None = None
    seed: int = 0
    step_log: str | None = None
    wake_lead: str | float = "adaptive"
    source: str = field(default="given", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The mapping from_mapping reads back (what `sdbench emulate` passes vLLM)."""
        data = asdict(self)
        data.pop("source")
        return data

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str) -> EmulationSettings:
        if not isinstance(data, dict):
            raise SettingsError(f"{source}: expected an object of settings, got "
                                f"{type(data).__name__}")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise SettingsError(f"{source}: unknown emulator setting(s) {unknown}; known: "
                                f"{list(_KEYS)}")
        if not data.get("profile"):
            raise SettingsError(f"{source}: 'profile' (the artifact that prices every step) "
                                "is required")
        wake_lead = data.get("wake_lead", "adaptive")
        if wake_lead != "adaptive" and not (isinstance(wake_lead, (int, float))
                                            and 0 <= wake_lead < 0.01):
            raise SettingsError(f"{source}: wake_lead must be 'adaptive' or seconds in "
                                f"[0, 0.01), got {wake_lead!r}")
        asynchronous = data.get("async_scheduling")
        if asynchronous is not None and not isinstance(asynchronous, bool):
            raise SettingsError(f"{source}: async_scheduling must be true, false or null, "
                                f"got {asynchronous!r}")
        blocks, length = data.get("num_gpu_blocks"), data.get("acceptance_length")
        try:
            return cls(profile=str(data["profile"]),
                       num_gpu_blocks=None if blocks is None else int(blocks),
                       acceptance_length=None if length is None else float(length),
                       async_scheduling=asynchronous, seed=int(data.get("seed", 0)),
                       step_log=data.get("step_log"), wake_lead=wake_lead, source=source)
        except (TypeError, ValueError) as exc:
            raise SettingsError(f"{source}: {exc}") from None

    @classmethod
    def from_vllm_config(cls, vllm_config: VllmConfig) -> EmulationSettings:
        additional = getattr(vllm_config, "additional_config", None) or {}
        if isinstance(additional, dict) and SETTINGS_KEY in additional:
            return cls.from_mapping(additional[SETTINGS_KEY],
                                    f"additional_config[{SETTINGS_KEY!r}]")
        raw = os.environ.get(SETTINGS_ENV)
        if raw:
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise SettingsError(f"${SETTINGS_ENV}: not JSON ({exc})") from None
            return cls.from_mapping(data, f"${SETTINGS_ENV}")
        raise SettingsError(f"sdbench emulate: no settings: give --additional-config "
                            f"'{{\"{SETTINGS_KEY}\": {{\"profile\": PATH}}}}' or "
                            f"${SETTINGS_ENV}")
