"""The sdbench_emulated_server fixture's servers: an emulated `vllm serve` of a profile
(pytest_sdbench.emulate: vLLM's own server, every step at the profile's price, no model, no
GPU), started the first time a test asks for that profile (and those extra `vllm serve`
arguments), shared by the session's later tests, and stopped at the end of the session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..emulate.server import EmulatedServer


class EmulatedServers:
    """server(profile, *vllm_serve_args) -> the base URL (http://127.0.0.1:PORT) of an
    emulated server of the profile; .server(...) the same server's EmulatedServer (its
    folder, step log, server log, command); close() stops them all."""

    def __init__(self, tmp_path_factory, say: Callable[[str], None] = print,
                 start=None) -> None:
        self._folder = lambda: Path(tmp_path_factory.mktemp("emulated"))
        self._say = say
        self._start = start
        self._servers: dict[tuple[Path, tuple[str, ...]], EmulatedServer] = {}

    def __call__(self, profile, *vllm_args: str) -> str:
        return self.server(profile, *vllm_args).url

    def server(self, profile, *vllm_args: str) -> EmulatedServer:
        from ..emulate.server import EmulationRefused, prepare, start
        from ..fidelity.served import ServingFailed
        key = (Path(profile).resolve(), tuple(vllm_args))
        if key not in self._servers:
            try:
                prepared = prepare(profile, vllm_args)
                self._servers[key] = (self._start or start)(prepared, self._folder(),
                                                            say=self._say)
            except (EmulationRefused, ServingFailed) as exc:
                pytest.fail(f"sdbench_emulated_server: {exc}", pytrace=False)
        return self._servers[key]

    def close(self) -> None:
        """Stop every server this session started (each is stopped even if one fails)."""
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()
