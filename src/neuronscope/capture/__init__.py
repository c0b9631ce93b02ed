"""Capture: wrapping user code in torch.profiler with the right device activities."""
