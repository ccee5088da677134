"""The consumer's rule of docs/events.md, as the Go consumer.View applies it.

A View holds, per partition key, the newest object kubewire's events gave
it. Feed it the events of each partition (a Kafka partition, a JetStream
stream) in the order they were read, with apply() and tombstone():

- an event whose id was already applied is dropped: for one key, an event
  with the uid, resourceVersion and type of the object held;
- an event never replaces an object of a higher resourceVersion, nor
  brings back a deleted one at the version it was deleted at or lower;
- added, updated and synced put the object at its key; deleted and a Kafka
  tombstone remove the key (a delete of a key not held changes nothing);
- snapshot.completed removes every key of its resource in its partition
  that had no event since the matching snapshot.started, unless the marker
  carries the incomplete extension;
- a snapshot window is applied once per partition: after its completed
  marker, a replay of its markers and synced records is skipped;
- a synced record of a snapshot that started after a key was pruned brings
  the key back, even at the version it was pruned at;
- a conflated event is applied as any other: it carries the newest state;
- a watch.gap changes no object, but at each partition's copy of it the
  versions of the keys of its scope that the partition carries are
  forgotten: their next change, or record of a snapshot that started after
  the gap, is applied whatever its version (after an etcd restore objects
  come back older), and a copy of the event that set them is still dropped;
- a record that breaks the contract (no resourceversion, or one that is
  not a decimal unsigned integer; a gap whose from or to is not one) is not
  applied, and apply() says why; so is a snapshot.completed whose started
  was never read, which prunes nothing.

testdata/consumer-vectors holds streams and the state they must end in;
`consume.py --file <vector>.jsonl --state` prints this View's state.
"""

from dataclasses import dataclass

PREFIX = "io.kubewire."
ADDED, UPDATED, DELETED, SYNCED = (PREFIX + "object." + t for t in ("added", "updated", "deleted", "synced"))
STARTED, COMPLETED = PREFIX + "snapshot.started", PREFIX + "snapshot.completed"
# A gap says versions in a range may be missing; the snapshot that follows
# repairs the state (an audit records it). The versions of its scope are
# forgotten: objects may come back older.
GAP = PREFIX + "watch.gap"
# A resource that left the cluster (a deleted CRD): every key of it goes,
# deletes streamed or not, since a watch broken through the deletion
# never saw them.
REMOVED = PREFIX + "resource.removed"
TYPES = {ADDED, UPDATED, DELETED, SYNCED, STARTED, COMPLETED, GAP, REMOVED}


def version(s):
    """A version as the contract has it, a decimal unsigned integer
    (etcd's revision), or None for anything else."""
    if isinstance(s, str) and 0 < len(s) <= 20 and all("0" <= c <= "9" for c in s) and int(s) < 1 << 64:
        return int(s)
    return None


def older(a, b):
    """Whether resourceVersion a is lower than b."""
    x, y = version(a), version(b)
    return x is not None and y is not None and x < y


@dataclass
class Entry:
    """An object held, or what is left of a removed one (gone)."""

    key: str
    uid: str
    rv: str
    partition: str
    seq: int  # when the key last had an event: snapshots prune by it
    type: str = ""
    reference: bool = False
    data: object = None
    namespace: str = ""
    forgot: int = 0  # seq of the gap that made the View forget the version; 0 once an event set it
    skip_tomb: str = ""  # a partition whose next tombstone of the key follows a delete not applied


class View:
    def __init__(self):
        self.objects = {}  # key -> Entry
        self.gone = {}  # key -> Entry: removed keys, until a complete snapshot passes them
        self.pruned = {}  # key -> seq of the prune, for keys of gone a snapshot pruned
        self.windows = {}  # (partition, snapshotid) -> (resource, seq of started)
        self.done = set()  # (partition, snapshotid) whose completed was applied
        self.seq = 0

    def state(self):
        """The objects held, as the vectors' expected states write them."""
        return [{"key": e.key, "uid": e.uid, "resourceVersion": e.rv} for _, e in sorted(self.objects.items())]

    def tombstone(self, partition, key):
        """A Kafka tombstone: a record with the key and no value. It has no
        version: it removes only an object its own partition set, and not
        after a delete that was not applied (step T of the rule)."""
        self.seq += 1
        held = self.objects.get(key)
        if held is None or held.partition != partition:
            return
        if held.skip_tomb == partition:
            held.skip_tomb = ""
            return
        self._remove(held)

    def apply(self, partition, event):
        """Applies one kubewire CloudEvent read from partition. Returns
        None when the rule handled it (applied or dropped), or why it is
        not a record of the contract, which is not applied."""
        ext = event.get_extension
        key, typ = ext("partitionkey"), event.get_type()
        if not key:
            return "no partitionkey"
        if typ not in TYPES:
            return f"type {typ!r} is not one of kubewire's contract version 1"
        self.seq += 1
        if typ == GAP:
            return self._gap(partition, key, event.get_data())
        if typ == REMOVED:
            return self._removed(partition, key)
        window = (partition, ext("snapshotid"))
        if typ == STARTED:
            # Skip a replayed window, and keep the first copy's start of an
            # open one: a later start would count fewer keys as seen.
            if window not in self.done and window not in self.windows:
                self.windows[window] = (key, self.seq)
            return None
        if typ == COMPLETED:
            return self._complete(partition, window, ext("incomplete") is not None)

        uid, rv = ext("uid") or "", ext("resourceversion") or ""
        if version(rv) is None:
            return f"resourceversion {rv!r} is not a decimal unsigned integer" if rv else "no resourceversion"
        # Any event, even one dropped below, counts as an event of its key.
        held, gone = self.objects.get(key), self.gone.get(key)
        if held is not None:
            held.seq = self.seq
        if gone is not None:
            gone.seq = self.seq
        window_start = 0
        if typ == SYNCED:
            if window in self.done:
                return None  # a record of a window already applied
            window_start = self.windows.get(window, (None, 0))[1]

        # After a gap the version remembered is forgotten, for a change or a
        # record of a snapshot that started after the gap.
        last = held if held is not None else gone
        forgot = last is not None and last.forgot > 0 and (typ != SYNCED or window_start > last.forgot)

        def older_than(b):
            return not forgot and older(rv, b)

        if typ == DELETED:
            if held is None:
                if gone is not None and (gone.uid == uid and gone.rv == rv or older_than(gone.rv)):
                    return None  # a copy, or the late delete of an earlier object
                # A delete of a key not held: remember it, so that a late
                # copy of an older event does not bring the key back.
                self.gone[key] = Entry(key, uid, rv, partition, self.seq, namespace=ext("namespace") or "")
                self.pruned.pop(key, None)
                return None
            if held.uid != uid and older_than(held.rv):
                held.skip_tomb = partition  # the tombstone after it is as late
                return None  # a late delete of an earlier object under this key
            self._remove(held)
            self.gone[key] = Entry(key, uid, rv, partition, self.seq, namespace=held.namespace)
            return None

        reference = ext("payload") == "reference"
        # A pruned key comes back with a record of a snapshot that started
        # after the prune, or one from another partition than the one that
        # pruned it, at that version or above (the topic grew).
        restore = held is None and key in self.pruned and typ == SYNCED and (
            gone.partition == partition and window_start > self.pruned[key]
            or gone.partition != partition and not older(rv, gone.rv))
        if held is not None and held.uid == uid and held.rv == rv and (reference or not held.reference):
            return None  # a duplicate
        if held is not None and older_than(held.rv):
            return None  # stale
        if held is None and gone is not None and not restore and not forgot and (gone.uid == uid and gone.rv == rv or older(rv, gone.rv)):
            return None  # a late copy of an event before the delete
        self.objects[key] = Entry(key, uid, rv, partition, self.seq, typ, reference, event.get_data(), ext("namespace") or "")
        self.gone.pop(key, None)
        self.pruned.pop(key, None)
        return None

    def _gap(self, partition, resource, data):
        """A watch.gap read from partition: forgets the versions of the keys
        of its scope that partition carries."""
        if not isinstance(data, dict):
            return "gap data is not a JSON object"
        for end in ("from", "to"):
            if version(data.get(end)) is None:
                return f"gap {end} {data.get(end)!r} is not a decimal unsigned integer"
        namespace = data.get("namespace") or ""
        for e in [*self.objects.values(), *self.gone.values()]:
            if e.partition == partition and e.key.split("/", 1)[0] == resource and namespace in ("", e.namespace):
                e.forgot = self.seq
        return None

    def _removed(self, partition, resource):
        """A resource.removed read from partition: every object of the
        resource that partition set is gone, and its open windows there
        will never complete."""
        for window in [w for w, (r, _) in self.windows.items() if w[0] == partition and r == resource]:
            del self.windows[window]
        for e in [e for e in self.objects.values() if e.partition == partition and e.key.split("/", 1)[0] == resource]:
            self._remove(e)
        return None

    def _remove(self, held):
        del self.objects[held.key]
        self.pruned.pop(held.key, None)
        self.gone[held.key] = Entry(held.key, held.uid, held.rv, held.partition, self.seq,
                                    namespace=held.namespace, forgot=held.forgot)

    def _complete(self, partition, window, incomplete):
        if window in self.done:
            return None  # a replay: measured from an old started, it must prune nothing
        self.done.add(window)
        if window not in self.windows:
            # Its started was never read (reading began inside the window):
            # it prunes nothing, and says so.
            return f"snapshot {window[1]!r} was never started in this partition"
        resource, start = self.windows.pop(window)
        if incomplete:
            return None  # a key with no event may be an undelivered record: prune nothing

        def passed(e):
            return e.partition == partition and e.seq < start and e.key.split("/", 1)[0] == resource

        for e in [e for e in self.gone.values() if passed(e)]:
            del self.gone[e.key]
            self.pruned.pop(e.key, None)
        for e in [e for e in self.objects.values() if passed(e)]:
            self._remove(e)
            self.pruned[e.key] = self.seq
