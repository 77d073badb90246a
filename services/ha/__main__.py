"""`python -m services.ha --store ROOT`: the ha process, as the supervisor starts it."""
from services.ha.service import Replicator
from services.base import run_service

raise SystemExit(run_service(Replicator))
