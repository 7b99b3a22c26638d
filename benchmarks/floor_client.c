/* The least a streaming client can cost: the floor client_bench.py sets beside agentbench.

   CONC keep-alive connections to 127.0.0.1:PORT, each POSTing a chat completion with
   a BODY-byte prompt as soon as its last answer ended, until N answers ended. Every socket
   read is stamped (clock_gettime into a preallocated array, as a client that keeps each
   event's arrival must) and nothing else is done with the bytes: the end of a chunked
   answer is found from its last bytes (or its Content-Length), nothing is parsed or kept. Level-triggered epoll,
   one read() per readable socket per wake-up, as an event loop does.

   Prints one JSON line: requests, reads per request. Built by client_bench.py with
   `cc -O2`; usage: floor_client PORT CONC N BODY */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STAMPS 65536
#define BUF (256 * 1024)

struct conn {
    int fd;
    char tail[8]; /* the last bytes of the answer so far */
    int reads;
    long left; /* Content-Length bytes still to come; -1: chunked */
    long long stamps[MAX_STAMPS];
};

static char *request;
static size_t request_len;

static void send_all(int fd) {
    size_t off = 0;
    while (off < request_len) { /* a blocking write of the whole request */
        ssize_t w = write(fd, request + off, request_len - off);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            perror("write");
            exit(1);
        }
        off += (size_t)w;
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT CONC N BODY\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), conc = atoi(argv[2]);
    long n = atol(argv[3]), body = atol(argv[4]);
    const char *pre = "{\"model\":\"fast\",\"stream\":true,\"max_tokens\":128,"
                      "\"messages\":[{\"role\":\"user\",\"content\":\"";
    const char *post = "\"}]}";
    size_t blen = strlen(pre) + (size_t)body + strlen(post);
    char *json = malloc(blen + 1);
    strcpy(json, pre);
    memset(json + strlen(pre), 'a', (size_t)body);
    strcpy(json + strlen(pre) + body, post);
    request = malloc(blen + 512);
    request_len = (size_t)sprintf(request,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", port, blen);
    memcpy(request + request_len, json, blen);
    request_len += blen;

    int ep = epoll_create1(0);
    struct conn *cs = calloc((size_t)conc, sizeof *cs);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    long issued = 0, ended = 0, reads = 0;
    for (int i = 0; i < conc && issued < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
            perror("connect");
            return 1;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        cs[i].fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        send_all(fd);
        issued++;
    }
    static char buf[BUF];
    struct epoll_event evs[1024];
    while (ended < n) {
        int k = epoll_wait(ep, evs, 1024, 10000);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            fprintf(stderr, "stalled: %ld of %ld ended\n", ended, n);
            return 1;
        }
        for (int j = 0; j < k; j++) {
            struct conn *c = evs[j].data.ptr;
            ssize_t r = read(c->fd, buf, BUF);
            if (r <= 0) {
                if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                fprintf(stderr, "connection closed\n");
                return 1;
            }
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            if (c->reads < MAX_STAMPS) c->stamps[c->reads] = ts.tv_sec * 1000000000LL + ts.tv_nsec;
            c->reads++;
            if (c->reads == 1) { /* the head: these servers send it whole in the first read */
                char *end = memmem(buf, (size_t)r, "\r\n\r\n", 4);
                if (end == NULL) {
                    fprintf(stderr, "response head not in one read\n");
                    return 1;
                }
                char *cl = memmem(buf, (size_t)(end - buf), "Content-Length:", 15);
                c->left = cl ? atol(cl + 15) - (long)(r - (end + 4 - buf)) : -1;
            } else if (c->left >= 0) {
                c->left -= r;
            }
            if (c->left == 0) {
                ended++;
                reads += c->reads;
                c->reads = 0;
                if (issued < n) {
                    send_all(c->fd);
                    issued++;
                }
                continue;
            }
            /* the last 7 bytes of the answer so far */
            if (r >= 7) {
                memcpy(c->tail, buf + r - 7, 7);
            } else {
                memmove(c->tail, c->tail + r, (size_t)(7 - r));
                memcpy(c->tail + 7 - r, buf, (size_t)r);
            }
            if (memcmp(c->tail, "\r\n0\r\n\r\n", 7) == 0) {
                ended++;
                reads += c->reads; /* as RequestRecord.reads: the head came with the first event */
                c->reads = 0;
                memset(c->tail, 0, sizeof c->tail);
                if (issued < n) {
                    send_all(c->fd);
                    issued++;
                }
            }
        }
    }
    printf("{\"requests\": %ld, \"reads_per_request\": %.3f}\n", ended, (double)reads / (double)ended);
    return 0;
}
