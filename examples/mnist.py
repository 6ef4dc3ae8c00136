"""The shape of PyTorch's MNIST example (a CNN whose forward calls F.relu, F.max_pool2d,
dropout and torch.flatten between its children; Adadelta with a StepLR schedule; train and
test loops over DataLoaders), on synthetic 14x14 digits so that it needs no download. With
--workers N the one changed line deploys the model; dropout draws the same masks there.

    python examples/mnist.py [--workers 2]
"""
from common import parser

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def digits(n: int, patterns):
    """``n`` noisy images of the ten ``patterns``, labelled by pattern."""
    labels = torch.randint(0, 10, (n,))
    return TensorDataset(patterns[labels] + 0.3 * torch.randn(n, 1, 14, 14), labels)


def train(model, loader, optimizer, epoch):
    model.train()
    for batch, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch % 4 == 0:
            print(f"epoch {epoch} batch {batch}: loss {loss.item():.6f}")


def test(model, loader):
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1, keepdim=True).eq(target.view_as(
                output.argmax(dim=1, keepdim=True))).sum().item()
    n = len(loader.dataset)
    print(f"test: average loss {loss / n:.6f}, accuracy {correct}/{n}")


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(1)
    patterns = torch.randn(10, 1, 14, 14)  # the "digits"
    train_loader = DataLoader(digits(160, patterns), batch_size=16, shuffle=True)
    test_loader = DataLoader(digits(48, patterns), batch_size=24)
    model = Net()
    cluster = None
    if args.workers:  # the one changed line (and the cluster it runs on)
        from disthook.distributed import local_cluster
        cluster = local_cluster(args.workers)
        model = cluster.deploy(model, stages=args.workers)
    try:
        grads = []
        model.fc1.register_full_backward_hook(
            lambda m, grad_in, grad_out: grads.append(grad_out[0].abs().sum().item()))
        optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        for epoch in range(1, 4):
            train(model, train_loader, optimizer, epoch)
            test(model, test_loader)
            scheduler.step()
        print(f"gradient reaching fc1, summed over the last step: {grads[-1]:.6f}")
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
