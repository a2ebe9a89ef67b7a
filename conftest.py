# pytester drives the plugin the way a downstream repository uses it (tests/test_plugin.py).
pytest_plugins = ("pytester",)
