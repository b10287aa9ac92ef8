#include <cstdio>
#include <cstdlib>
#define A(s) asm volatile(s:::"memory")
#define SB if(v&8)A("barrier.sync 0;");else A("barrier.sync 1;")
#define PB if(v&4)A("bar.sync 2,128;");else A("bar.sync 0,128;")
template<int v>__global__ void k(){__shared__ unsigned st[2];int w=threadIdx.x>>5;
if(w<4){if(v&1){PB;}st[1]=0x02000101u;SB;SB;if(v&2){PB;}SB;st[1]=0x03030303u;SB;return;}
for(;;){SB;unsigned char s=((volatile unsigned char*)st)[w];if(s==3)return;SB;SB;}}
int main(int c,char**a){int v=atoi(a[1]);switch(v){
#define C(n) case n:k<n><<<1,256>>>();break;
C(0)C(1)C(2)C(3)C(5)C(8)C(9)}printf("v=%d rc=%d\n",v,(int)cudaDeviceSynchronize());}
