"""traced_step_seconds on constructed profiler events: the interval each step holds the
stream (the definition the native CUDA events follow), and the host range on CPU."""

from types import SimpleNamespace

from torch.autograd import DeviceType

from pytest_sdbench.plugin.testing import STEP_RANGE_PREFIX, traced_step_seconds


def _event(iid, device, start_us, end_us, name=None):
    return SimpleNamespace(name=name or f"{STEP_RANGE_PREFIX}{iid}", device_type=device,
                           time_range=SimpleNamespace(start=start_us, end=end_us))


def test_a_step_starts_at_host_entry_or_when_the_stream_frees():
    events = [
        _event(1, DeviceType.CPU, 0, 400), _event(1, DeviceType.CUDA, 100, 1000),
        # step 2 is entered while step 1's kernels still run: it starts at 1000, not 500
        _event(2, DeviceType.CPU, 500, 900), _event(2, DeviceType.CUDA, 1000, 1600),
        # step 3 is entered on an idle stream: it starts at host entry (the idle head counts)
        _event(3, DeviceType.CPU, 2000, 2100), _event(3, DeviceType.CUDA, 2300, 2800),
        _event(3, DeviceType.CUDA, 2900, 3000),     # a second piece of the same range
        _event(4, DeviceType.CPU, 3100, 3200),      # no kernel: left out
        _event(5, DeviceType.CUDA, 0, 1, name="aten::mm"),
    ]
    seconds = traced_step_seconds(events, "cuda")
    assert seconds.keys() == {1, 2, 3}
    assert abs(seconds[1] - 1000e-6) < 1e-12
    assert abs(seconds[2] - 600e-6) < 1e-12
    assert abs(seconds[3] - 1000e-6) < 1e-12


def test_on_cpu_a_step_is_its_host_range():
    events = [_event(7, DeviceType.CPU, 10, 60), _event(7, DeviceType.CPU, 70, 110),
              _event(8, DeviceType.CPU, 200, 250),
              _event(9, DeviceType.CPU, 0, 5, name=f"{STEP_RANGE_PREFIX}None")]
    assert traced_step_seconds(events, "cpu") == {7: 100e-6, 8: 50e-6}
