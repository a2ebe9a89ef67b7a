"""Stamps native iteration IDs, freezes snapshots, receives timing samples, joins them."""
