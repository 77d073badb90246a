"""Delayed delivery (DESIGN.md section 11): the rewrite of a delayed put, the delay-level scheduler,
the timer wheel and its job, and the delivered offsets."""
