"""Exports of artifacts into what a consumer reads; AISimulate first (`sdbench export`)."""
