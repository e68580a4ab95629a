# The wheel installs this file as genai_pacer/runtime.pyi, so type checkers and editors of an installed
# genai-pacer see pacer_runtime's real names and signatures (runtime.py loads them dynamically). In the
# wheel the handler code lives at genai_pacer/_lambda; in a checkout runtime.py's TYPE_CHECKING import
# covers the same names.
from ._lambda.pacer_runtime import *
from ._lambda.pacer_runtime import __all__ as __all__
