"""An echo "model" for the endpoint-scaling integration test: no weights, nothing to download.

The Hugging Face inference toolkit loads /opt/ml/model/code/inference.py and calls these hooks
instead of loading a transformers model, so a CPU instance serves requests at once and the test
pays for minutes of an ml.m5.large, not a GPU.
"""


def model_fn(model_dir, *args):
    return {"model_dir": model_dir}


def predict_fn(data, model, *args):
    text = data.get("inputs", "") if isinstance(data, dict) else str(data)
    return [{"generated_text": str(text)}]
