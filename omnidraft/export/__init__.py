"""Turning target and drafter into on-device graphs (ONNX now; ExecuTorch next)."""
