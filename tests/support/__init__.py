"""Test infrastructure for neuronscope (not product code).

- otlp_receiver: a real OTLP/HTTP + OTLP/gRPC peer on 127.0.0.1 (OtlpReceiver, dead_endpoint).
- phoenix: Arize Phoenix as a real OTLP trace backend, in its own venv (.ci/phoenix.sh).
- gaps: the gaps of a run that its code's own sleeps made (a loaded machine makes longer ones).
"""
