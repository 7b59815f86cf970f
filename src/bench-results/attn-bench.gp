# attn-bench plot; run: gnuplot bench-results/attn-bench.gp
set terminal svg size 560,760 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'bench-results/attn-bench.svg'
set multiplot layout 1,1 title 'attn 0.1.0 (git ac2496231aba-dirty) on AMD EPYC, 1 thread, 2026-11-22'
set logscale xy
set grid
set key outside below left Left reverse maxrows 6 font ',9' samplen 2
set xtics ('1k' 1024, '2k' 2048) nomirror
set xrange [1024:2048]
set title 'Decode: one query over a cache; linear step'
set xlabel 'cache (tokens)'
set ylabel 'tokens/s'
set format y '%.0s%c'
plot '-' using 1:2 with linespoints lc rgb '#17becf' dt 1 pt 7 lw 1.5 title 'softmax_decode avx2 d64', \
     732118 with lines dt 1 lw 1.5 lc rgb '#7f7f7f' title 'linear_identity_decode avx2 d64', 517588 with lines dt 1 lw 1.5 lc rgb '#bcbd22' title 'linear_elu1_decode avx2 d64'
1024 35882.6
e
unset multiplot
