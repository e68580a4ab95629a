"""Moved to genai_pacer._internal.secure in 0.2.0 (StateMachineOptions and model_state_machine: genai_pacer.step_functions.state_machine); this alias is removed in 0.3.0 (_internal/moved.py)."""
from ._internal.moved import alias

alias(__name__)
