"""The compact schedule (contract.schedule.Program): the JSON round trip, `Op` views,
validation messages, the builder's array runs."""

import numpy as np
import pytest

from contract.schedule import RECV, SEND, Op, Program, Schedule, ScheduleBuilder
from planner.collectives.rings import multiring_allreduce, topoopt_rings


def _small() -> Schedule:
    b = ScheduleBuilder(3, "small")
    b.buffer("grad", 64)
    c = b.compute(0, "compute", 0.25)
    b.send(0, "s", 1, "grad", 0, 8, tag=1, after=[c])
    b.recv(1, "s", 0, "grad", 0, 8, tag=1, mode="copy")
    b.extend_columns(
        2,
        "r",
        np.array([SEND, RECV]),
        np.array([0, 1]),
        "grad",
        np.array([8, 16]),
        np.array([4, 4]),
        2,
        np.array([0, 1]),
    )
    b.recv(0, "t", 2, "grad", 8, 4, tag=2)
    b.send(1, "t", 2, "grad", 16, 4, tag=2)
    return b.build()


def test_json_round_trip_is_identical():
    sched = _small()
    d = sched.to_dict()
    assert Schedule.from_dict(d).to_dict() == d
    assert d["programs"][0]["s"] == [
        {"id": 1, "op": "send", "peer": 1, "buffer": "grad", "offset": 0, "length": 8, "tag": 1, "after": [0]}
    ]
    assert d["programs"][2]["r"][1] == {
        "id": 1,
        "op": "recv",
        "peer": 1,
        "buffer": "grad",
        "offset": 16,
        "length": 4,
        "tag": 2,
        "mode": "reduce",
    }
    assert d["programs"][0]["compute"] == [{"id": 0, "op": "compute", "seconds": 0.25}]


def test_ops_read_as_op_objects():
    sched = _small()
    prog = sched.programs[0]
    assert list(prog) == ["compute", "s", "t"]
    assert prog["s"][0] == Op(1, "send", 1, "grad", 0, 8, 1, "", 0.0, (0,), 0)
    assert prog["compute"][0].seconds == 0.25 and prog["compute"][0].kind == "compute"
    assert [op.id for ops in prog.values() for op in ops] == [0, 1, 2]
    assert sched.op_count() == 7 and sched.bytes_sent() == [8, 4, 4]
    with pytest.raises(KeyError):
        prog["nope"]


def test_ids_from_json_are_kept():
    d = _small().to_dict()
    d["programs"][0]["s"][0]["id"] = 7
    d["programs"][0]["compute"][0]["id"] = 5
    d["programs"][0]["s"][0]["after"] = [5]
    sched = Schedule.from_dict(d)
    sched.validate()
    assert sched.programs[0]["s"][0].id == 7 and sched.programs[0]["s"][0].after == (5,)
    assert Schedule.from_dict(sched.to_dict()).to_dict() == sched.to_dict()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["programs"][0]["s"][0].update(id=0), "duplicate op id"),
        (lambda d: d["programs"][0]["compute"][0].update(seconds=-1.0), "negative compute time"),
        (lambda d: d["programs"][0]["s"][0].update(op="jump"), "unknown op 'jump'"),
        (lambda d: d["programs"][1]["s"][0].update(mode="add"), "recv mode 'add'"),
        (lambda d: d["programs"][0]["s"][0].update(after=[9]), r"waits on unknown ops \[9\]"),
        (lambda d: d["programs"][0]["s"][0].update(plane=-1), "plane -1"),
        (lambda d: d["programs"][0]["s"][0].update(length=128), "outside buffer"),
    ],
)
def test_validate_names_the_first_problem(edit, message):
    d = _small().to_dict()
    edit(d)
    with pytest.raises(ValueError, match=message):
        Schedule.from_dict(d).validate()


def test_add_after_and_extend_number_ops():
    b = ScheduleBuilder(2, "x")
    b.buffer("grad", 16)
    first = b.compute(0, "c", 1.0)
    assert b.extend_columns(0, "r", np.array([SEND]), 1, "grad", np.array([0]), np.array([4]), 1, 0) == 1
    b.recv(1, "r", 0, "grad", 0, 4, tag=1)
    b.add_after(0, first, [1])
    sched = b.build()
    assert sched.programs[0]["c"][0].after == (1,)
    assert b.build().to_dict() == sched.to_dict()  # the builder can build again


def test_a_ring_schedule_takes_a_few_bytes_per_op():
    n = 16
    sched = multiring_allreduce(n, n * 4 * 1000, topoopt_rings(n, [1, 3]))
    per_op = sum(p.nbytes for p in sched.programs) / sched.op_count()
    assert per_op < 24  # an Op object takes about 170
    assert all(isinstance(p, Program) for p in sched.programs)


def test_programs_of_op_lists_are_converted():
    ops = {"s": [Op(0, "send", 1, "grad", 0, 4, 1)], "r": [Op(1, "recv", 1, "grad", 4, 4, 1, "copy")]}
    back = {"s": [Op(0, "recv", 0, "grad", 0, 4, 1, "reduce")], "r": [Op(1, "send", 0, "grad", 4, 4, 1)]}
    from contract.schedule import Buffer

    sched = Schedule(2, "lists", {"grad": Buffer("grad", 8)}, [ops, back])
    sched.validate()
    assert list(sched.programs[0]["r"]) == ops["r"]
