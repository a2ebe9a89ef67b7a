"""Hooks that other plugins and conftest files may implement."""

from pluggy import HookspecMarker

hookspec = HookspecMarker("pytest")


@hookspec
def pytest_sdbench_artifact_written(config, path, artifact):
    """Called after the plugin wrote and validated an artifact (path: pathlib.Path,
    artifact: pytest_sdbench.wire.model.Artifact)."""
