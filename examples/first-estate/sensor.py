"""The plant's temperature sensor, simulated (loaded by plant.flo).

Deterministic: each time the act runs the temperature rises by ``rise``,
or falls by ``fall`` while the fan (the ``from`` share) is on.
"""

from flowcast.behaving import Io, behaviour


@behaviour("sensor.temperature")
def temperature(io: Io, start: float = 20.0, rise: float = 0.5, fall: float = 1.0):
    value = start  # a generator: this lives while the frame is entered
    while True:
        fan_on = io.input is not None and io.input.get("value") == "on"
        value += -fall if fan_on else rise
        io.output.update(value=round(value, 2))
        yield
