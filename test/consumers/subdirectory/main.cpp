// A C++ program that builds hattn through add_subdirectory() and links hattn::hattn.
#include "../consumer_checks.h"

int consumer_cuda_part();

int main() {
    if (consumer_cuda_part() != HATTN_VERSION) {
        fprintf(stderr, "subdirectory consumer: FAIL: own.cu saw another hattn.h\n");
        return 1;
    }
    return hattn_consumer_checks("add_subdirectory consumer, hattn::hattn");
}
