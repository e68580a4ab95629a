"""The SQS worker behind genai_pacer.QueuedInference."""
