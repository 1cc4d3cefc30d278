"""bench/text_lstm_torch_check.py -- a cross-check for bench/bench_al.sh (issue 20), not a test.

Trains the zoo's text_lstm by backpropagation in python3-torch (an embedding of 64, 4 nn.LSTM
layers of 64, the classes from the last token) on sentences drawn like bench/text_corpus.h's
(the same rules, Python's RNG: not the same sentences), Adam 0.003, batch 32, 10 epochs, 25% held
out: is BP's spread across seeds the model's or our LSTM op's?

Usage: /usr/bin/python3 bench/text_lstm_torch_check.py [--embedding-std S] [--seeds 1 2] [--layers 4]
"""
import argparse
import random

import torch


def sentences(n, tokens=32, seed=20):
    rng = random.Random(seed)
    zipf = [1.0 / ((k + 1) ** 1.1) for k in range(958)]  # filler ids 42..999
    xs, ys = [], []
    while len(ys) < n:
        s = [0] + [42 + rng.choices(range(958), weights=zipf)[0] for _ in range(tokens - 1)]
        intended = rng.randrange(4)
        slots = list(range(2, tokens))
        rng.shuffle(slots)
        votes, places = [0] * 4, []
        for p in slots[:rng.randint(3, 5)]:
            if any(abs(q - p) < 2 for q in places):
                continue
            places.append(p)
            c = intended if rng.random() < 0.6 else rng.randrange(4)
            s[p] = 2 + c * 10 + rng.randrange(10)
            negated = rng.random() < 0.25
            if negated:
                s[p - 1] = 1
            votes[(c + 2) % 4 if negated else c] += 1
        if votes.count(max(votes)) != 1:
            continue
        xs.append(s)
        ys.append(votes.index(max(votes)))
    return torch.tensor(xs), torch.tensor(ys)


class TextLstm(torch.nn.Module):
    def __init__(self, layers, std):
        super().__init__()
        self.embedding = torch.nn.Embedding(1000, 64)
        if std is not None:
            torch.nn.init.normal_(self.embedding.weight, 0, std)
        self.lstm = torch.nn.ModuleList([torch.nn.LSTM(64, 64, batch_first=True) for _ in range(layers)])
        self.classifier = torch.nn.Linear(64, 4)

    def forward(self, x):
        h = self.embedding(x)
        for lstm in self.lstm:
            h = lstm(h)[0]
        return self.classifier(h[:, -1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--embedding-std", type=float, default=None, help="N(0, S) instead of nn.Embedding's N(0, 1)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    x, y = sentences(5000)
    for seed in a.seeds:
        torch.manual_seed(seed)
        order = torch.randperm(len(y))
        test, train = order[:1250], order[1250:]
        model = TextLstm(a.layers, a.embedding_std)
        opt = torch.optim.Adam(model.parameters(), 3e-3)
        for _ in range(10):
            shuffled = train[torch.randperm(len(train))]
            for i in range(0, len(shuffled) - 31, 32):
                idx = shuffled[i:i + 32]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
        with torch.no_grad():
            acc = lambda idx: (model(x[idx]).argmax(1) == y[idx]).float().mean().item()
            print(f"seed {seed}: test {100 * acc(test):.1f}%, train {100 * acc(train):.1f}%", flush=True)


if __name__ == "__main__":
    main()
