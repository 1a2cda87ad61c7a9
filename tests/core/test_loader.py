from toolbox.data.loader import BatchLoader


def _ids(batch):
    return batch


def test_resumed_loader_yields_the_same_batches():
    data = list(range(10))
    a = BatchLoader(data, 3, _ids, seed=1)
    seq = [a.next_batch() for _ in range(7)]  # crosses two epoch boundaries (3 batches/epoch)
    b = BatchLoader(data, 3, _ids, seed=1)
    for _ in range(4):
        b.next_batch()
    state = b.state_dict()
    c = BatchLoader(data, 3, _ids, seed=1)
    c.load_state_dict(state)
    assert [c.next_batch() for _ in range(3)] == seq[4:]
    epoch0, epoch1 = sum(seq[:3], []), sum(seq[3:6], [])
    assert len(set(epoch0)) == 9 and len(set(epoch1)) == 9  # each epoch: a permutation
    assert epoch0 != epoch1  # reshuffled


def test_ranks_see_disjoint_shards():
    data = list(range(8))
    r0 = BatchLoader(data, 2, _ids, seed=0, rank=0, world_size=2)
    r1 = BatchLoader(data, 2, _ids, seed=0, rank=1, world_size=2)
    seen0 = r0.next_batch() + r0.next_batch()
    seen1 = r1.next_batch() + r1.next_batch()
    assert not set(seen0) & set(seen1)
    assert sorted(seen0 + seen1) == data
