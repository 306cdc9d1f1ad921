"""Loss recovery for a link: RTT estimate, congestion window, back-off, timers.

The sender (sender.py) keeps packets in flight and resends what is lost;
this part estimates the round trip (srtt, rttvar, rto), says how fast to
send (cwnd, halved once per loss episode: AIMD), backs the timeout off
while nothing is heard, and says what is due when (``next_deadline`` and
``poll``: delayed ACK, a packet older than the timeout, probes, message
deadlines, the hold budget's expiry sweep).
It is a mixin of :class:`flowcast.transport.reliable.Link`, not an
object of its own: the ACK path grows ``cwnd`` once per acknowledged
packet, and an attribute read through a second object would cost that
path on every packet.
"""

from __future__ import annotations

import heapq

from flowcast.transport import budget as _budget

__all__ = ["INITIAL_RTO", "MAX_RTO", "MIN_CWND", "MIN_RTO", "RECOVERY_SLOTS", "Recovery"]

MIN_RTO = 0.05
MAX_RTO = 2.0
INITIAL_RTO = 0.25
MIN_CWND = 64 * 1024

#: The state this part owns; ``Link.__slots__`` is made of each part's.
RECOVERY_SLOTS = (
    "backoff",
    "cwnd",
    "largest_acked",
    "last_progress",
    "max_cwnd",
    "recovery_point",
    "rto",
    "rttvar",
    "srtt",
)


class Recovery:
    """RTT, congestion and timers; ``Link`` mixes it in (slots: RECOVERY_SLOTS)."""

    __slots__ = ()

    def _init_recovery(self, max_cwnd: int, now: float) -> None:
        self.cwnd = min(1 << 20, max_cwnd)
        self.max_cwnd = max_cwnd
        self.largest_acked = -1
        self.recovery_point = -1
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.rto = INITIAL_RTO
        self.backoff = 0
        self.last_progress = now

    def _congested(self, counter: int) -> None:
        """Packet ``counter`` was lost: halve the window, once per loss episode.

        An episode is everything sent before the first loss was seen: losses
        of packets sent before it are the same congestion, not more of it.
        """
        if counter > self.recovery_point:
            self.recovery_point = self.last_counter
            self.cwnd = max(self.cwnd >> 1, MIN_CWND)

    def _rtt_sample(self, sample: float) -> None:
        """Fold one round trip into srtt/rttvar and the timeout (RFC 6298's weights and bounds).

        Only packets sent once are sampled (a resend gets a new counter), so
        a sample is never the ambiguous time of a retransmission.
        """
        if sample < 0:
            return
        if self.srtt is None:
            self.srtt = sample
            self.rttvar = sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        rto = self.srtt + 4 * self.rttvar
        self.rto = MIN_RTO if rto < MIN_RTO else MAX_RTO if rto > MAX_RTO else rto

    def _rto_now(self) -> float:
        """The timeout now: doubled per timeout without news (``backoff``), capped; a lane's is longer."""
        return min(MAX_RTO * 4, self.rto * (1 << self.backoff))

    def next_deadline(self) -> float | None:
        deadline = self.ack_due if not self.ack_owed else None
        inflight = self.inflight
        if inflight:
            for record in inflight.values():  # the oldest packet in flight
                when = record[0] + self._rto_now()
                break
            if deadline is None or when < deadline:  # a delayed ACK may be due first
                deadline = when
        elif self.pending_count and not self.resend and (not self.fresh or not self.can_send()):
            when = self.last_progress + self._rto_now()
            if deadline is None or when < deadline:
                deadline = when
        for queue in self.unfinished.values():
            if queue:
                head_deadline = queue[0].deadline
                if head_deadline is not None and (deadline is None or head_deadline < deadline):
                    deadline = head_deadline
        early = self._early
        while early and not early[0][3].pending:
            heapq.heappop(early)
        if early and (deadline is None or early[0][0] < deadline):
            deadline = early[0][0]
        sweep_at = self.sweep_at
        if sweep_at is not None and (deadline is None or sweep_at < deadline):
            deadline = sweep_at
        return deadline

    def poll(self, now: float) -> None:
        """Run what is due: delayed ACK, time-threshold loss, probes, message deadlines, expiry."""
        if self.sweep_at is not None and self.sweep_at <= now:
            self.sweep_at = _budget.expire(self, now)
        if self.ack_due is not None and self.ack_due <= now:
            self.ack_owed = True
            self.ack_due = None
        inflight = self.inflight
        if inflight:
            rto = self._rto_now()
            first = next(iter(inflight))
            if inflight[first][0] + rto <= now:
                self.backoff = min(self.backoff + 1, 6)
                while inflight:
                    counter = next(iter(inflight))
                    if inflight[counter][0] + rto > now:
                        break
                    self._lost(counter, inflight.pop(counter))
                if not self.resend and self.pending_count:
                    self.ping_owed = True
        elif self.pending_count and not self.resend and (not self.fresh or not self.can_send()):
            if self.last_progress + self._rto_now() <= now:
                self.ping_owed = True
                self.backoff = min(self.backoff + 1, 6)
                self.last_progress = now
        for queue in list(self.unfinished.values()):
            while queue:
                head = queue[0]
                if head.deadline is None or head.deadline > now or not head.pending:
                    break
                self.fail(head, "timeout")
                if queue and queue[0] is head:
                    break
        early = self._early
        while early and early[0][0] <= now:
            msg = heapq.heappop(early)[3]
            if msg.pending:
                self.fail(msg, "timeout")

