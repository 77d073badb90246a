"""`python -m services.appender --store ROOT`: the appender process, as the supervisor starts it."""
from services.appender.service import Appender
from services.base import run_service

raise SystemExit(run_service(Appender))
