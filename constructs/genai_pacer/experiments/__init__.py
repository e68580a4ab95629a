"""Live A/B tests of prompts and models: `PromptExperiment` (variants and split in AWS AppConfig, guard
alarms that roll a split change back and send everyone to control) and `verdict` (the offline analysis
of what the runtime logged: sample-ratio check, intervals; pure Python, no CDK). Sticky assignment and
variant-tagged metrics at run time are `genai_pacer.runtime.experiment`. Documentation: docs/experiments.md.

The constructs load on first use, so `from genai_pacer.experiments import verdict` starts no CDK.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .prompt_experiment import ExperimentVariant as ExperimentVariant
    from .prompt_experiment import ManagedPrompt as ManagedPrompt
    from .prompt_experiment import PromptExperiment as PromptExperiment
    from .prompt_experiment import TextPrompt as TextPrompt

_LAZY = {name: ".prompt_experiment" for name in ("ExperimentVariant", "ManagedPrompt", "PromptExperiment", "TextPrompt")}
__all__ = ["ExperimentVariant", "ManagedPrompt", "PromptExperiment", "TextPrompt", "verdict"]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, ("prompt_experiment", "verdict"))
