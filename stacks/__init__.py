"""Reference stacks: how genai-pacer's constructs compose, and what `make synth` deploys."""
