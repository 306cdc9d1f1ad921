"""Example user behaviours, loaded by flows with ``load behaviors/counter.py``."""

from flowcast.behaving import Io, behaviour


@behaviour("counter")
def counter(io: Io, step: int = 1, limit: int = 0):
    """Count up by ``step`` each time the frame recurs; mark the output done at ``limit``.

    A generator: its local ``count`` lives as long as the frame stays
    entered, and starts again from zero when the frame is re-entered.
    """
    count = 0
    while True:
        count += step
        io.output.update(value=count, done=bool(limit) and count >= limit)
        yield


@behaviour("greeter")
class Greeter:
    """Prints a greeting once per entry, naming the share it counts."""

    def __init__(self, io: Io, greeting: str = "hello") -> None:
        self.io = io
        self.greeting = greeting

    def __call__(self) -> None:
        share = self.io.input
        print(f"{self.greeting}: {share.name} = {share.value}" if share else self.greeting, flush=True)
