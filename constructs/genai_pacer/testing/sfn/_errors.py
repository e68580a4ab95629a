"""The one error the offline runner raises for what it cannot execute faithfully."""

from __future__ import annotations


class OfflineExecutionError(Exception):
    """A state machine (or its template) uses something the offline runner cannot execute the way AWS
    would. The message names the state or resource, what is not supported, and what to do instead."""
