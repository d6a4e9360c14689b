"""The data kernelgate's layers share: what a run is given and what it gives back.

Stdlib only and free of I/O, so every layer, the child included, may import it:

- :mod:`.result` -- :class:`~kernelgate.model.result.RunResult`, its parts, the statuses;
- :mod:`.limits` -- :class:`~kernelgate.model.limits.Limits`, a run's budgets;
- :mod:`.text` -- text that can always be shown and sent (``safe_str``);
- :mod:`.constants` -- numbers both sides agree on.

Nothing is imported here: the child imports :mod:`.text` and :mod:`.constants` alone, and
each module it loads is start-up time of every cold run.
"""

from __future__ import annotations

__all__: list[str] = []
