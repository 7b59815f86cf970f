# attn-analyze plot; redraw with: cd docs/analysis && gnuplot rank.gp
set terminal svg size 1500,520 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'rank.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 1,3 title 'Numerical rank (tol = n eps_32) of attn''s attention matrices'
set logscale xy 2
set key top left
set ylabel 'rank'
set title 'linear attention against m (n = 512)'
set xlabel 'm (softmax: d)'
plot [1.5:300] [1:1024] x lc rgb 'black' dt 2 title 'rank = m', 'rank_linear_m.csv' using 3:(strcol(1) eq 'identity' ? $5 : 1/0) with linespoints lc rgb '#1f77b4' title 'identity', 'rank_linear_m.csv' using 3:(strcol(1) eq 'elu1' ? $5 : 1/0) with linespoints lc rgb '#d62728' title 'elu1', 'rank_linear_m.csv' using 3:(strcol(1) eq 'relu' ? $5 : 1/0) with linespoints lc rgb '#2ca02c' title 'relu', 'rank_linear_m.csv' using 3:(strcol(1) eq 'exp' ? $5 : 1/0) with linespoints lc rgb '#ff7f0e' title 'exp', 'rank_linear_m.csv' using 3:(strcol(1) eq 'favor' ? $5 : 1/0) with linespoints lc rgb '#9467bd' title 'favor', 'rank_linear_m.csv' using 3:(strcol(1) eq 'dsoftmax' ? $5 : 1/0) with linespoints lc rgb '#8c564b' title 'dsoftmax', 'rank_softmax.csv' using 2:($1 == 512 ? $4 : 1/0) with linespoints lw 2 lc rgb 'black' title 'softmax'
set title 'windowed linear attention (d = m = 16; full mask at n)'
set xlabel 'keys seen, 2r + 1'
plot [0.8:768] [8:1024] 16 lc rgb 'black' dt 2 title 'm', 512 lc rgb 'gray60' dt 2 title 'n', 'rank_window.csv' using 4:(strcol(1) eq 'elu1' && strcol(2) ne 'causal' ? $5 : 1/0) with linespoints lc rgb '#d62728' title 'elu1', 506 lc rgb '#d62728' dt 3 title 'elu1 causal', 'rank_window.csv' using 4:(strcol(1) eq 'exp' && strcol(2) ne 'causal' ? $5 : 1/0) with linespoints lc rgb '#2ca02c' title 'exp', 512 lc rgb '#2ca02c' dt 3 title 'exp causal', 'rank_window.csv' using 4:(strcol(1) eq 'relu' && strcol(2) ne 'causal' ? $5 : 1/0) with linespoints lc rgb '#ff7f0e' title 'relu', 498 lc rgb '#ff7f0e' dt 3 title 'relu causal'
set title 'softmax attention against d (tol = n eps_32)'
set xlabel 'd'
plot [0.8:80] x lc rgb 'black' dt 2 title 'rank(QK^T) = d', 'rank_softmax.csv' using 2:($1 == 64 ? $4 : 1/0) with linespoints lc rgb '#1f77b4' title 'n = 64', 'rank_softmax.csv' using 2:($1 == 128 ? $4 : 1/0) with linespoints lc rgb '#d62728' title 'n = 128', 'rank_softmax.csv' using 2:($1 == 256 ? $4 : 1/0) with linespoints lc rgb '#2ca02c' title 'n = 256', 'rank_softmax.csv' using 2:($1 == 512 ? $4 : 1/0) with linespoints lc rgb '#ff7f0e' title 'n = 512', 'rank_softmax.csv' using 2:($1 == 1024 ? $4 : 1/0) with linespoints lc rgb '#9467bd' title 'n = 1024'
unset logscale
unset multiplot
