"""Several threads writing, reading and iterating one database at once.
Every scan must see a point in time: each writer writes its keys in
order, so a scan holds a prefix of every writer's keys."""

import threading

import sluicedb
from conftest import SMALL

WRITERS = 4
PER_WRITER = 1500


def test_threads_write_read_and_iterate(path):
    db = sluicedb.DB(path, **SMALL)
    errors: list = []
    done = threading.Event()

    def writer(t):
        try:
            i = 0
            while i < PER_WRITER:
                if i % 3 == 0:
                    with db.write_batch() as wb:
                        for j in range(i, min(i + 10, PER_WRITER)):
                            wb.put(b"w%d-%06d" % (t, j), b"%d" % j * 20)
                    i = min(i + 10, PER_WRITER)
                else:
                    db.put(b"w%d-%06d" % (t, i), b"%d" % i * 20)
                    i += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def scanner(reverse):
        try:
            while not done.is_set():
                seen: dict = {t: [] for t in range(WRITERS)}
                for k, v in db.iterator(reverse=reverse):
                    t, i = k[1:].split(b"-")
                    assert v == b"%d" % int(i) * 20
                    seen[int(t)].append(int(i))
                for t, got in seen.items():
                    if reverse:
                        got.reverse()
                    assert got == list(range(len(got))), f"writer {t}: not a prefix"
        except BaseException as e:
            errors.append(e)

    def reader():
        try:
            while not done.is_set():
                for t in range(WRITERS):
                    v = db.get(b"w%d-%06d" % (t, 0))
                    assert v is None or v == b"0" * 20
        except BaseException as e:
            errors.append(e)

    writers = [threading.Thread(target=writer, args=(t,)) for t in range(WRITERS)]
    others = [
        threading.Thread(target=scanner, args=(False,)),
        threading.Thread(target=scanner, args=(True,)),
        threading.Thread(target=reader),
    ]
    for th in writers + others:
        th.start()
    for th in writers:
        th.join()
    done.set()
    for th in others:
        th.join()
    assert not errors, errors
    assert len(list(db.keys())) == WRITERS * PER_WRITER
    db.close()


def test_threads_share_one_iterator(db):
    for i in range(5000):
        db.put(b"%06d" % i, b"v")
    it = db.keys()
    got: list = []
    lock = threading.Lock()

    def take():
        for k in it:
            with lock:
                got.append(k)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(got) == [b"%06d" % i for i in range(5000)]


def test_close_while_other_threads_use_the_database(path):
    db = sluicedb.DB(path, **SMALL)
    for i in range(2000):
        db.put(b"%06d" % i, b"v" * 100)
    outcomes: list = []

    def user():
        try:
            while True:
                list(db.iterator(start=b"000500", stop=b"000600"))
                db.put(b"x", b"y")
        except sluicedb.ClosedError:
            outcomes.append("closed")
        except BaseException as e:
            outcomes.append(e)

    threads = [threading.Thread(target=user) for _ in range(3)]
    for th in threads:
        th.start()
    while db.get(b"x") is None:
        pass
    db.close()
    for th in threads:
        th.join()
    assert outcomes == ["closed"] * 3
