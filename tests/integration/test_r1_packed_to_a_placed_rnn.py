"""A PackedSequence made by the model's own forward here and given to a placed LSTM (tacotron2's
encoder: ``pack_padded_sequence`` in the model's forward, the LSTM on a worker): the worker
takes it as a PackedSequence, not as a look-alike (it refused it: no attribute 'ndim'), so the
deployed model gives what one process gives."""
import copy

import numpy as np

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(9, 6)
        self.encoder = nn.LSTM(6, 3, 1, batch_first=True, bidirectional=True)
        self.head = nn.Linear(6, 2)

    def forward(self, text, lengths):
        emb = self.embedding(text)
        packed = nn.utils.rnn.pack_padded_sequence(emb, lengths, batch_first=True)
        out, _ = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return self.head(out)


def test_a_packed_sequence_made_here_runs_the_lstm_on_its_worker(cluster):
    torch.manual_seed(0)
    model = Encoder()
    text = torch.tensor(np.random.RandomState(0).randint(1, 9, (3, 7)))
    lengths = torch.tensor([7, 5, 4])
    logs = []
    for m in (model, cluster.deploy(copy.deepcopy(model), stages=2)):
        out = m(text, lengths)
        out.pow(2).sum().backward()
        logs.append([out.detach().numpy(), m.encoder.weight_hh_l0_reverse.grad.numpy()])
    for got, want in zip(logs[1], logs[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
