"""A stage remembers the numbers of the optimizer calls that ran on it, so that one sent
again (its carrier, a forward, failed on a later stage) runs once. Before, the stage kept
one record for all its clients and forgot the oldest of any client's past 4096: another
client's 4096 numbered calls (a zero_grad of an optimizer of its own, cheap and allowed to
any client of a published model) pushed out a call of the deployer that was waiting to be
sent again, and the deployer's ``optimizer.step()`` then ran twice on that stage, silently.
Now each client's record forgets only its own oldest, and when the stage's records are
full the largest one gives way."""
from disthook import nn
from workers import stages
from workers.stages import Stage


def _stage() -> Stage:
    return Stage("m", 0, nn.Sequential(nn.Linear(2, 2)), owner=b"deployer")


def test_another_clients_calls_do_not_push_out_a_call_that_ran():
    st = _stage()
    assert st.first_time(b"deployer", 7)  # its step rode with a forward that failed later
    for n in range(2 * stages.CALLS_REMEMBERED):  # another client of the shared model, meanwhile
        st.first_time(b"mallory", n)
    assert not st.first_time(b"deployer", 7)  # sent again: it ran here, it is skipped


def test_many_clients_share_the_stage_record_and_each_keeps_its_latest():
    st = _stage()
    assert st.first_time(b"deployer", 1)
    for who in range(40):  # more clients than the stage keeps calls for, each at its cap
        for n in range(stages.CALLS_PER_CLIENT + 5):
            st.first_time(b"client %d" % who, n)
    assert st.calls_kept == sum(map(len, st.calls_done.values())) <= stages.CALLS_REMEMBERED
    assert not st.first_time(b"deployer", 1)
    assert not st.first_time(b"client 39", stages.CALLS_PER_CLIENT + 4)  # its latest, kept
    assert st.first_time(b"client 39", 0)  # its oldest gave way (its own record's)
    st.forget(b"deployer")
    assert st.first_time(b"deployer", 1)  # gone with its client
    assert st.calls_kept == sum(map(len, st.calls_done.values()))
