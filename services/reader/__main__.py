"""`python -m services.reader --store ROOT`: the reader process, as the supervisor starts it."""
from services.reader.service import Reader
from services.base import run_service

raise SystemExit(run_service(Reader))
