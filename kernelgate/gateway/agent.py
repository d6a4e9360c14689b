"""What a gateway tells a model: the stub, the ``run_code`` tool, the rules, the search.

:class:`~kernelgate.gateway.gateway.Gateway` takes these from :class:`AgentSurface`; they
read the gateway's configuration and never start a run (the search a *program* makes is
answered by :mod:`.discovery`'s built-in bindings, through a run's calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

from kernelgate.model.limits import Limits

from . import describe as _describe
from . import tools as _tools
from .bindings import BindingRegistry
from .discovery import Discovery, fitted_description, search_tool_schema
from .rules import python_imports, run_rules
from .runtime import CodeRuntime, PythonRuntime
from .sandbox import SandboxSupport

__all__ = ["AgentSurface"]


class AgentSurface:
    """The describing half of a gateway: its subclass sets the attributes below."""

    _registry: BindingRegistry
    _discovery: Discovery
    _support: SandboxSupport | None
    _described: list[dict[str, Any]] | None
    _stub: str | None
    _imports: tuple[list[str] | None] | None
    runtime: CodeRuntime
    limits: Limits
    sandbox: str | None
    strict: bool
    tool_search: bool

    @property
    def language(self) -> str:
        """The language programs are written in (the runtime's name): ``"python"``,
        ``"typescript"`` or ``"javascript"``."""
        return self.runtime.name

    @property
    def python(self) -> str | None:
        """The interpreter of a Python gateway's children (None for another language)."""
        return self.runtime.python if isinstance(self.runtime, PythonRuntime) else None

    @overload
    def describe(
        self, format: Literal["text"] = "text", *, names: Sequence[str] | None = None
    ) -> str: ...
    @overload
    def describe(
        self, format: Literal["json"], *, names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]: ...
    @overload
    def describe(
        self, format: Literal["typescript"], *, names: Sequence[str] | None = None
    ) -> str: ...
    def describe(
        self, format: str = "text", *, names: Sequence[str] | None = None
    ) -> str | list[dict[str, Any]]:
        """The bindings as a model is told about them: a stub in the programs' language
        (for Python the text ``help(tools)`` prints in a program), or per binding JSON
        with a JSON Schema of its parameters (``format="json"``), or TypeScript
        declarations (``format="typescript"``). See :mod:`kernelgate.gateway.describe`.
        ``names`` (``["tracker.create_issue", "files"]``: bindings or whole namespaces)
        describes only those (``ValueError`` naming any that is not there).

        >>> def add(a: int, b: int) -> int:
        ...     return a + b
        >>> from kernelgate import Gateway
        >>> print(Gateway(bindings={"add": add}).describe().split("\\n\\n")[-1])
        class tools:
            async def add(a: int, b: int) -> int:
                ...
        <BLANKLINE>
        """
        if names is not None:
            specs, entries = self._discovery.select(names)
            if format == "text":
                return self.runtime.render_stub(specs, entries)
            if format == "json":
                return _describe.copy_json(entries)
            if format == "typescript":
                return _describe.render_declarations(entries, specs)
        if format == "text":
            if self._stub is None:
                self._stub = self.runtime.render_stub(self._registry.specs(), self._entries())
            return self._stub
        return _describe.describe(self._registry, format)  # type: ignore[call-overload,no-any-return]

    def _entries(self) -> list[dict[str, Any]]:
        """``describe(format="json")``, made once (the registry never changes); callers
        get copies."""
        if self._described is None:
            self._described = _describe.describe_json(self._registry)
        return self._described

    def sandbox_level(self) -> str:
        """The sandbox level this gateway's runs get: ``sandbox``, or the strongest this
        machine allows (probed once per interpreter, the first time it is asked)."""
        support = self._support or self.runtime.probe()
        level = self.sandbox or support.strongest
        if support.missing(level) and not self.strict:
            level = support.strongest  # what _plan falls back to
        return level

    def run_rules(self) -> str:
        """The rules of a run as the ``run_code`` description states them: this gateway's
        limits, whether its sandbox level cuts the network off, what programs can import
        (:mod:`kernelgate.gateway.rules`)."""
        if self._imports is None:
            # Read once per gateway: listing an environment's distributions takes ~0.3 s.
            self._imports = (python_imports(self.python) if self.python is not None else None,)
        level = self.sandbox_level()
        return run_rules(self.limits, level, self.language, python_imports=self._imports[0])

    def tool_schema(
        self,
        api: str = "anthropic",
        *,
        max_description_chars: int | None = None,
        stub_in: str = "description",
    ) -> dict[str, Any]:
        """The ``run_code`` tool for ``api`` (``"anthropic"``, ``"openai"``, ``"mcp"``):
        one required string ``code``; the description explains the program model, the
        rules of a run (:meth:`run_rules`) and embeds :meth:`describe`.

        ``max_description_chars`` bounds the description (some OpenAI-compatible endpoints
        refuse more than 1,024 characters): past it the description lists the binding
        names (or their number) and points at the search (:meth:`search_tool_schema`,
        and ``kernelgate.search_tools`` in programs with ``tool_search=True``).
        ``stub_in="system"`` leaves the stub out of the description, for
        :meth:`system_prompt` to carry.

        >>> from kernelgate import Gateway
        >>> Gateway().tool_schema("anthropic")["input_schema"]["required"]
        ['code']
        """
        description = fitted_description(
            self.describe(),
            self._discovery.names(),
            self.language,
            self.run_rules(),
            max_description_chars,
            in_programs=self.tool_search,
            stub_in=stub_in,
        )
        return _tools.tool_schema("", api, self.language, description=description)

    def system_prompt(self) -> str:
        """The bindings for a system prompt (with ``tool_schema(stub_in="system")``): a line
        saying what they are, then :meth:`describe`."""
        kind = "a Python stub" if self.language == "python" else f"{self.language} declarations"
        return f"The bindings run_code programs can call, as {kind}:\n\n{self.describe()}"

    def search_bindings(self, query: str, limit: int = 5) -> list[str]:
        """The bindings whose names, docstrings and parameters best match ``query`` (BM25:
        :mod:`kernelgate.model.search`), as ``namespace.name``, best first.

        >>> from kernelgate import Gateway
        >>> gw = Gateway(namespaces={"tracker": {"create_issue": lambda title: 1},
        ...                          "files": {"read_file": lambda path: ""}})
        >>> gw.search_bindings("issue")
        ['tracker.create_issue']
        """
        return self._discovery.search(query, limit)

    def search_tools(self, query: str, limit: int | None = 5) -> str:
        """The answer to a model's ``search_tools`` call (:meth:`search_tool_schema`): the
        stub of the best matches, or why there is none. Never raises for what the model
        sent: a bad query is answered with what was wrong."""
        return self._discovery.answer(query, limit)

    def search_tool_schema(self, api: str = "anthropic") -> dict[str, Any]:
        """The ``search_tools`` tool for ``api`` (the shapes of :meth:`tool_schema`): a
        second tool beside ``run_code`` for a model with many bindings; answer its calls
        with :meth:`search_tools`."""
        return search_tool_schema(api, self.language)
