"""The data kernelgate's layers share: what a run is given and what it gives back.

Stdlib only and (but for :mod:`.removal`) free of I/O, so every layer, the child
included, may import it:

- :mod:`.result` -- :class:`~kernelgate.model.result.RunResult`, its parts, the statuses
  (``Status``, a ``Literal``);
- :mod:`.limits` -- :class:`~kernelgate.model.limits.Limits`, a run's budgets;
- :mod:`.codec` -- the one versioned RunResult <-> JSON codec (run metadata, calls, runs),
  with :mod:`.keyorder` for dict key order;
- :mod:`.signatures` -- binding specs <-> ``inspect.Signature``, and signature text;
- :mod:`.text` -- text that can always be shown and sent (``safe_str``);
- :mod:`.constants` -- numbers both sides agree on;
- :mod:`.removal` -- removing a run directory whatever its program made in it: the one
  module here with I/O, because the host and the zygote (below the host's layer) both
  remove what programs leave.

Nothing is imported here: the child imports :mod:`.text`, :mod:`.constants` and
:mod:`.signatures` alone, and each module it loads is start-up time of every cold run.
The one import that points up is ``RunResult.save``/``to_notebook`` (public API
convenience), inside those methods.
"""

from __future__ import annotations

__all__: list[str] = []
