"""Read-only attributes computed from an object's parts, typed (``property(lambda ...)`` reads as ``Any``).

Example:
    >>> class Run:
    ...     steps: Derived[int] = Derived(lambda run: len(run.log), "Steps logged so far.")
    ...     def __init__(self) -> None:
    ...         self.log = [1, 2]
    >>> Run().steps, Run.steps.__doc__
    (2, 'Steps logged so far.')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Derived(Generic[T]):
    """A read-only attribute: ``get(obj)`` at each read, an ``AttributeError`` on a write (as a property's)."""

    def __init__(self, get: Callable[[Any], T], doc: str) -> None:
        self._get, self.__doc__ = get, doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Derived[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> T | Derived[T]:
        """The value read from ``obj``'s parts; the descriptor itself on the class."""
        return self if obj is None else self._get(obj)

    def __set__(self, obj: object, value: T) -> None:
        """Refuse a write, as a property without a setter does."""
        raise AttributeError(f"{type(obj).__name__}.{self._name} is read-only")
